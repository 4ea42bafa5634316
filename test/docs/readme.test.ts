import t from 'tap'
import { mkdtempSync, rmSync, symlinkSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { main } from '../../src/commands.js'
import { listen } from '../helper.js'
import { parseSse } from '../sse.js'
import { docBlocks, runShell } from './doc-blocks.js'

// The README's first calls, run as written against a server (only the port changes), and its first
// agent's commands held against what the scaffold prints (test/scaffold.test.ts runs them).

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.test('the README\'s JSON call answers what it shows; sent again, the same answer; with a new request id, calls is 2', async (t) => {
  const { url } = await listen(t)
  const [call, second] = docBlocks('README.md', '## A first call, in JSON and in SSE')
  t.ok(call !== undefined && second !== undefined, 'a JSON call, then an SSE call')
  const [shown] = docBlocks('README.md', '## A first call, in JSON and in SSE', 'json')
  const expected = JSON.parse(shown as string) as { request_id: string, output: unknown, metrics: Record<string, unknown> }
  const script = (call as string).replaceAll('http://127.0.0.1:3000', url)

  const answer = JSON.parse(await runShell(script)) as typeof expected & { created_at: string }
  t.same(Object.keys(answer), Object.keys(expected), 'the fields it shows')
  t.equal(answer.request_id, expected.request_id)
  t.same(answer.output, expected.output, 'the output it shows')
  t.same(Object.keys(answer.metrics), Object.keys(expected.metrics))
  t.equal(answer.metrics.packets, expected.metrics.packets)

  t.same(JSON.parse(await runShell(script)), answer, 'sent again: the stored answer, the same created_at and calls: 1')
  const fresh = JSON.parse(await runShell(script.replace(expected.request_id, '11111111-1111-4111-8111-111111111112'))) as { output: { calls: number } }
  t.equal(fresh.output.calls, 2, 'a new request id in the same session: calls says 2')
})

t.test('the README\'s SSE call streams what it says: a thought, a second stream of one DELTA per word, its CLOSE, then the main CLOSE', async (t) => {
  const { url } = await listen(t)
  const [, call] = docBlocks('README.md', '## A first call, in JSON and in SSE')
  // the words 100 ms apart, as the README says; a test need not wait for them
  const script = (call as string).replaceAll('http://127.0.0.1:3000', url).replace('"query": "hello streaming world" }', '"query": "hello streaming world", "delay_ms": 0 }')
  t.not(script, (call as string).replaceAll('http://127.0.0.1:3000', url), 'the query is where the test expects it')
  const { packets, retry } = parseSse(await runShell(script))
  t.equal(retry, 3000, 'a retry: line')
  const main = packets.at(-1)?.stream_id
  const words = packets.filter((p) => p.op === 'DELTA')
  t.same(packets.map((p) => p.op === 'EVENT' ? p.p.type : p.op), ['THOUGHT_TRACE', 'STREAM_START', 'DELTA', 'DELTA', 'DELTA', 'CLOSE', 'CLOSE'])
  t.equal(packets[0]?.stream_id, main, 'the thought on the main stream')
  t.same(words.map((p) => p.p), ['hello ', 'streaming ', 'world '], 'one DELTA per word')
  t.ok(words.every((p) => p.stream_id === packets[1]?.stream_id && p.stream_id !== main), 'the words on the second stream')
  t.same(packets.filter((p) => p.op === 'CLOSE').map((p) => p.p), ['done', 'done'])

  // the frames it shows are real ones: each valid (parseSse checks every frame against the schema), with the real ones' fields
  const [text] = docBlocks('README.md', '## A first call, in JSON and in SSE', 'text')
  const shown = parseSse(`${(text as string).replace(/\.\.\.\n$/, '')}\n`, false)
  t.equal(shown.retry, 3000)
  t.same(shown.packets.map((p) => p.op === 'EVENT' ? p.p.type : p.op), ['THOUGHT_TRACE', 'STREAM_START', 'DELTA'], 'the first three frames')
  shown.packets.forEach((frame, i) => { t.same(Object.keys(frame), Object.keys(packets[i] as object), `frame ${i + 1} has the fields of the real one`) })
})

t.test('the README\'s first agent: the commands and the lines it shows are the scaffold\'s', async (t) => {
  const [commands] = docBlocks('README.md', '## Your first agent')
  const lines = (commands as string).split('\n').map((l) => l.replace(/\s+#.*$/, '')).filter((l) => l !== '')
  t.same(lines, ['npx tsx src/cli.ts new agent greeter', 'npx tap --disable-coverage test/agents/greeter.test.ts', 'npm run dev'])
  t.match(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.dev, /node scripts\/dev\.mjs$/, 'npm run dev watches the sources (scripts/dev.mjs)')

  const dir = mkdtempSync(join(tmpdir(), 'agent-host-readme-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  symlinkSync(join(ROOT, 'src'), join(dir, 'src'), 'dir')
  symlinkSync(join(ROOT, 'package.json'), join(dir, 'package.json'))
  const out: string[] = []
  t.equal(await main(['new', 'agent', 'greeter'], {}, { out: (l) => { out.push(l) }, err: () => {}, cwd: dir }), 0)
  const printed = out.join('\n')
  const [shown] = docBlocks('README.md', '## Your first agent', 'text')
  t.equal((shown as string).replace(/id [0-9a-f-]{36}/, 'id <uuid>'), printed.split('\n').slice(0, 3).join('\n').replace(/id [0-9a-f-]{36}/, 'id <uuid>') + '\n', 'the lines it shows')
  for (const line of lines.slice(1)) t.match(printed, `\n  ${line}\n`, `the scaffold says to run ${line}`)
})
