import t from 'tap'
import { AGENTS, build, envelope, sqliteDb } from '../helper.js'
import { ANONYMOUS } from '../../src/storage/api-keys.js'
import type { ServiceRequest } from '../../src/protocol/envelope.js'

// The engine asks nothing of its callers: the delivery mode is an input, and a caller admits a new
// run (rate limits, a stream slot) between prepare() and begin(), or refuses it by not beginning.
t.test('prepare stores nothing; begin starts the run; a prepared run begins once', async (t) => {
  const app = await build(t)
  const body = envelope(AGENTS.echo) as unknown as ServiceRequest
  const prepared = await app.assist.prepare(body, { identity: ANONYMOUS, delivery: 'own' })
  t.match(prepared, { mode: 'request_response', outcome: 'start', agent: { name: 'echo' } })
  t.equal((sqliteDb(app).prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, 0, 'nothing stored by prepare: a refused run leaves no trace')
  t.match(await app.assist.begin(prepared), { requestId: prepared.requestId, mode: 'request_response', outcome: 'started' })
  await t.rejects(app.assist.begin(prepared), /what this engine's prepare\(\) returned, once/)
  t.match((await app.assist.answer(prepared.requestId)).body, { output: { echo: 'hello world' } })

  const again = await app.assist.prepare(body, { identity: ANONYMOUS, delivery: 'server_sent_events' })
  t.match(again, { outcome: 'joined', mode: 'server_sent_events' }, 'a known request id is a join, which nothing admits; the mode the client takes, whatever the capability\'s')
  t.match(await app.assist.begin(again), { outcome: 'joined' })
})

t.test('a refused delivery is a 406 once the request is otherwise valid; shutdown refuses what has not begun', async (t) => {
  const app = await build(t)
  const refused = { refused: 'text/html' }
  await t.rejects(app.assist.prepare({ ...envelope('9a0d6f7e-0000-4000-8000-00000000dead'), request_id: crypto.randomUUID() } as unknown as ServiceRequest, { identity: ANONYMOUS, delivery: refused }), { code: 'AH_ERR_AGENT_NOT_FOUND' }, 'an unknown agent first')
  await t.rejects(app.assist.prepare(envelope(AGENTS.echo) as unknown as ServiceRequest, { identity: ANONYMOUS, delivery: refused }), { code: 'AH_ERR_NOT_ACCEPTABLE', message: /text\/html/ })

  const prepared = await app.assist.prepare(envelope(AGENTS.echo) as unknown as ServiceRequest, { identity: ANONYMOUS, delivery: 'own' })
  await app.assist.shutdown(1000)
  await t.rejects(app.assist.begin(prepared), { code: 'AH_ERR_SHUTTING_DOWN' }, 'closing began between the two steps: the run is not started')
  t.equal((sqliteDb(app).prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, 0)
})
