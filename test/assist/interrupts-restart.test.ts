// Heavy (a process of its own in `npm test`): a server process is stopped (SIGTERM, then SIGKILL) while a
// run waits for its answer, and a new one takes the answer; on PostgreSQL the answer goes to another
// instance than the one that asked. The waiting itself is tested in-process: test/assist/interrupts.test.ts.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { AGENTS, build, envelope, tempDataDir } from '../helper.js'
import { startServer } from '../server-child.js'
import { pgDatabase } from '../pg.js'

interface WireInterrupt { id: string, kind: string }

async function post (url: string, body: unknown): Promise<{ status: number, json: Record<string, any> }> {
  const res = await fetch(`${url}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify(body) })
  return { status: res.status, json: await res.json() as Record<string, any> }
}

for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
  t.test(`a run waiting for its answer outlives its server (${signal}): the next server on the same DATA_DIR takes the answer`, async (t) => {
    const env = { DATA_DIR: tempDataDir(t) }
    const first = envelope(AGENTS.ask, { question: `After ${signal}?` })
    const a = await startServer(t, env)
    const asked = await post(a.url, first)
    t.equal(asked.status, 200)
    const id = (asked.json.interrupts as WireInterrupt[])[0]?.id as string
    a.child.kill(signal)
    t.equal(await a.exited, signal === 'SIGTERM' ? 0 : 'SIGKILL')
    const b = await startServer(t, env)
    const answer = envelope(AGENTS.ask, { resume: [{ interrupt_id: id, value: { answer: 'still here' } }] }, { sessionId: first.context.session_id })
    const res = await post(b.url, answer)
    t.same([res.status, res.json.output], [200, { question: `After ${signal}?`, answer: 'still here' }])
    b.child.kill('SIGTERM')
    await b.exited
  })
}

t.test('PostgreSQL: a run asks on one instance, and another instance takes the answer and goes on', async (t) => {
  const url = await pgDatabase(t)
  if (url === undefined) return
  const a = await build(t, { DATABASE_URL: url })
  const b = await build(t, { DATABASE_URL: url })
  const first = envelope(AGENTS.ask, { question: 'Across instances?', approve: true })
  const asked = await a.inject({ method: 'POST', url: '/v1/assist', payload: first })
  const id = (asked.json().interrupts as WireInterrupt[])[0]?.id as string
  t.equal(a.runs.size, 0, 'no run is held while it waits')
  const res = await b.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.ask, { resume: [{ interrupt_id: id, value: { approved: true } }] }, { sessionId: first.context.session_id, requestId: randomUUID() }) })
  t.same([res.statusCode, res.json().output], [200, { question: 'Across instances?', approved: true }])
  const again = await a.inject({ method: 'POST', url: '/v1/assist', payload: envelope(AGENTS.ask, { resume: [{ interrupt_id: id, value: { approved: false } }] }, { sessionId: first.context.session_id }) })
  t.same([again.statusCode, again.json().code], [409, 'AH_ERR_INTERRUPT_CLOSED'], 'the first instance sees it answered')
})
