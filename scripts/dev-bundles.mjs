// `npm run dev` loads this beside tsx (`--import`): typebox and jose come from one bundle each, as in
// the test suite. Each of their hundreds of small ES modules otherwise costs a round trip to the
// module hooks' thread, about 0.8 s of CPU in every restart (the bundles are made once, into the
// test loader's cache: test/measure/typescript-hooks.mjs).
import { register } from 'node:module'

register('./dev-bundles-hooks.mjs', import.meta.url)
