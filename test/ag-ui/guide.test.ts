// docs/ag-ui.md's examples, run as written against a real server (only the port changes): the
// HttpAgent program and the curl of "Quick start", and the program of "Interrupts", each in a node
// process of its own in the repository (where @ag-ui/client is installed).
import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { listen } from '../helper.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** Run an ES module's source with node in the repository's root: its stdout. */
async function runModule (source: string): Promise<string> {
  return await new Promise((resolve, reject) => {
    execFile('node', ['--input-type=module', '-e', source], { cwd: ROOT, env: harnessFreeEnv(), timeout: 60_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
}

t.test('docs/ag-ui.md works as written: the HttpAgent program and curl of "Quick start", the interrupt program', { timeout: 120_000 }, async (t) => {
  const { url } = await listen(t, { WORKERS_PER_TYPE: '0' })
  const here = (text: string): string => text.replaceAll('http://127.0.0.1:3000', url)

  const [program] = docBlocks('docs/ag-ui.md', '## Quick start', 'js')
  t.same((await runModule(here(program as string))).split('\n'), ['hello streaming world ', 'hello streaming world ', ''], 'the words as they come, then the assembled assistant message')

  const [curl] = docBlocks('docs/ag-ui.md', '## Quick start')
  const sse = await runShell(here(curl as string))
  t.match(sse, /^data: \{"type":"RUN_STARTED","threadId":"guide-thread","runId":"guide-run-1","protocolVersion":"1.0"\}\n\n/, 'RUN_STARTED first')
  t.match(sse, /"delta":"hello ".*"delta":"streaming ".*"delta":"world ".*\{"type":"RUN_FINISHED","threadId":"guide-thread","runId":"guide-run-1","outcome":\{"type":"success"\}\}\n\n$/s, 'the words, then RUN_FINISHED')
  t.equal(await runShell(here(curl as string)), sse, 'sent again: the same run, whole')

  const [interrupt] = docBlocks('docs/ag-ui.md', '## Interrupts', 'js')
  t.same((await runModule(here(interrupt as string))).split('\n'), ['Which colour?', '{"question":"Which colour?","answer":"blue"}', ''], 'the question, then the result of the answered run')
})
