// The TypeScript loader of the test suite, loaded by .taprc's node-arg before anything else (see
// ./typescript-hooks.mjs for why it is not tap's ts-node nor tsx).
import { register } from 'node:module'

// children started with process.execArgv (servers, workers) may run in another folder: name the
// harness's own modules absolutely
process.execArgv = process.execArgv.map((arg) => {
  const match = /^--import=(\.\/.*\.mjs)$/.exec(arg)
  return match === null ? arg : `--import=${new URL(match[1], `file://${process.cwd()}/`).href}`
})

register('./typescript-hooks.mjs', import.meta.url)
