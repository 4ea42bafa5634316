// The TypeScript loader of the test suite, loaded by .taprc's node-arg before anything else (see
// ./typescript-hooks.mjs for why it is not tap's ts-node nor tsx).
import { register } from 'node:module'

// children started with process.execArgv (servers, workers) may run in another folder: name the
// harness's own modules absolutely. They are no tests: tap's mock loader (t.mockImport) is left out
// of them, a second chain of module hooks that cost each child some 0.6 s of CPU (of 3.9) to load
// the app.
process.execArgv = process.execArgv.filter((arg) => !/^--import=.*@tapjs\/mock\//.test(arg)).map((arg) => {
  const match = /^--import=(\.\/.*\.mjs)$/.exec(arg)
  return match === null ? arg : `--import=${new URL(match[1], `file://${process.cwd()}/`).href}`
})

register('./typescript-hooks.mjs', import.meta.url)
