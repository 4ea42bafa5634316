// Imported first by main.jsx, so it runs before any module that makes a zod schema: zod probes for
// eval with `new Function` (for its compiled parsers), which this page's Content-Security-Policy
// refuses and reports as a violation even though zod catches the error; jitless, it does not try.
import { config } from 'zod'

config({ jitless: true })
