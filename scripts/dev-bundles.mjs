// `npm run dev` loads this beside tsx (`--import`): the packages the project imports come from one
// esbuild build (./vendor-bundle.mjs), as in the test suite. Their hundreds of files otherwise cost
// each restart some 0.7 s of CPU, most of it round trips to the module hooks' thread.
import { register } from 'node:module'

register('./dev-bundles-hooks.mjs', import.meta.url)
