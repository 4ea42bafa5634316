import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { harnessFreeEnv } from '../child-env.js'
import { listen } from '../helper.js'
import { assertStreamRules, parseSse } from '../sse.js'
import { docBlocks } from './doc-blocks.js'

// The resume example of docs/runs.md, run as a reader runs it (only the port changes): the first
// curl is cut off by its --max-time, the reader puts the last packet's id and seq in the second's
// Last-Event-ID, and gets the rest: nothing lost, nothing twice.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** Run `script` with bash; its output, whatever its exit code (curl's --max-time exits 28). */
async function bash (script: string): Promise<string> {
  return await new Promise((resolve) => {
    execFile('bash', ['-c', script], { cwd: ROOT, env: harnessFreeEnv(), timeout: 60_000 }, (_error, stdout) => { resolve(stdout) })
  })
}

t.test('the resume example works as written: a stream cut off, then resumed from the last packet, complete and without repeats', async (t) => {
  const { url } = await listen(t)
  const [block] = docBlocks('docs/runs.md', '## Resuming')
  const [body, first, , second] = (block as string).replaceAll('http://127.0.0.1:3000', url).trimEnd().split('\n') as [string, string, string, string]
  t.match(first, /--max-time 1\.2/, 'the first curl gives up after 1.2 s')
  t.match(second, /last-event-id: <stream_id>:<seq>/, 'the second names the placeholder a reader fills in')

  const cut = await bash(`${body}\n${first}`)
  const got = parseSse(cut.slice(0, cut.lastIndexOf('\n\n') + 2), false).packets
  const last = got.at(-1) as StreamPacket
  const rest = parseSse(await bash(`${body}\n${second.replace('<stream_id>:<seq>', `${last.stream_id}:${last.seq}`)}`), false).packets
  const all = [...got, ...rest]
  t.ok(got.length >= 1 && got.length < all.length, `cut off after a few packets (${got.length} of ${all.length})`)
  assertStreamRules(all)
  t.same(all.filter((p) => p.op === 'DELTA').map((p) => p.p), ['one ', 'two ', 'three ', 'four ', 'five ', 'six '], 'every word once, in order')
})

t.test('the human-in-the-loop example works as written: the run asks, the answer in a second request goes on to the result', async (t) => {
  const { url } = await listen(t)
  const [block] = docBlocks('docs/runs.md', '## Human in the loop')
  const out = await bash((block as string).replaceAll('http://127.0.0.1:3000', url))
  t.equal(out, '{"question":"Which colour?","answer":"blue"}\n')
})
