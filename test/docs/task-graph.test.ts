import t from 'tap'
import { listen } from '../helper.js'
import { until } from '../socket.js'
import { docBlocks, runShell } from './doc-blocks.js'

// The task graph example of docs/task-graph-and-bus.md, each command run as written (only the port
// changes) in order, with the moments a reader waits (the tasks to finish, the narrator to speak)
// waited for, and each answer checked against what its comment says.

/** The block's commands: each starts with `curl`; the lines after it (a body, a comment) are its own. */
function commands (block: string): string[] {
  const out: string[] = []
  for (const line of block.trimEnd().split('\n')) {
    if (line.startsWith('curl ') || out.length === 0) out.push(line)
    else out[out.length - 1] += `\n${line}`
  }
  return out
}

t.test('the task graph example works as written: the graph, its result, its events, the narration, a refused cancel, a task nobody works', async (t) => {
  const { url } = await listen(t, { TASK_POLL_MS: '50' })
  const [block] = docBlocks('docs/task-graph-and-bus.md', '## The task graph')
  const steps = commands(block as string).map((c) => c.replaceAll('http://127.0.0.1:3000', url))
  t.equal(steps.length, 9, 'nine commands')
  const json = async (i: number): Promise<any> => JSON.parse(await runShell(steps[i] as string))
  const get = async (path: string): Promise<any> => await (await fetch(`${url}${path}`)).json()

  // the POST, then the page's wait for the graph to finish (a reader who skips it sees PENDING)
  t.same((await json(0)).tasks.map((x: { id: string }) => x.id), ['count-a', 'count-b', 'sum'], 'three tasks made')
  t.match(steps[0], /\nuntil curl .*tasks\/sum .*COMPLETED/, 'the page waits for the graph before it shows the result')
  const summary = JSON.parse(/# (".*")$/m.exec(steps[1] as string)?.[1] as string) as string
  t.match(await json(1), { status: 'COMPLETED', outputs: { artifacts: [{ summary }] } }, `the summary it shows: ${summary}`)
  t.same((await json(2)).tasks.map((x: { id: string }) => x.id).sort(), ['count-a', 'count-b', 'sum'])
  const types = (await json(3)).events.map((e: { type: string }) => e.type)
  t.ok(types.includes('AGENT_UPDATE') && types.includes('AGENT_RESULT'), `AGENT_UPDATE, AGENT_RESULT: ${types.join(', ')}`)
  await until('the narrator to speak', async () => (await get('/v1/conversations/demo/events')).events.length >= 3, 30_000, 20)
  const seen = (await json(4)).events
  t.ok(seen.length >= 3 && seen.every((e: { type: string }) => e.type === 'NARRATION'), 'what users see: NARRATION only')
  t.ok((await json(5)).events.some((e: { type: string }) => e.type === 'AGENT_RESULT'), 'internal=true: the agents\' events too')
  t.match(await json(6), { statusCode: 409, code: 'AH_ERR_TASK_STATE' }, 'it is already done')
  t.match(await json(7), { tasks: [{ type: 'translate', status: 'PENDING' }], warnings: [{ code: 'unknown_task_type', type: 'translate' }] }, 'made, with a warning: no "translate" agent here')
  t.match((await json(8)).tasks, [{ type: 'translate', waiting_ms: Number }], 'each with waiting_ms')
})
