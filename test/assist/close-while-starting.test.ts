import t from 'tap'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { AGENTS, build, envelope, FIXTURE_AGENTS_DIR, SCRIPTED, tempDataDir } from '../helper.js'
import { ANONYMOUS } from '../../src/storage/api-keys.js'
import type { ServiceRequest } from '../../src/protocol/envelope.js'

// Regression: a request whose run was being stored when the server began closing started its agent
// after the database had closed; its finish then threw "The database connection is not open" out of
// an unawaited promise and took the process down (seen at the end of bench/assist.js rounds).
t.test('closing while requests are being started: each gets its answer or a 503, every stored run is ended, nothing throws', async (t) => {
  for (let closeAt = 1; closeAt <= 8; closeAt++) {
    const dir = tempDataDir(t)
    const app = await build(t, { DATA_DIR: dir })
    const answers: Array<Promise<number | string>> = []
    let closed: Promise<void> | undefined
    // requests keep arriving, a few each turn of the event loop, before and after close begins
    for (let turn = 0; turn < 10; turn++) {
      for (let i = 0; i < 4; i++) {
        // inject() into a closed app rejects, as a closed port refuses a connection
        answers.push(app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENTS.echo) })
          .then((res) => res.statusCode, (err: { code?: string }) => err.code ?? 'error'))
      }
      if (turn === closeAt) closed = app.close()
      await new Promise((resolve) => setImmediate(resolve))
    }
    const statuses = await Promise.all(answers)
    await closed
    t.ok(statuses.every((s) => s === 200 || s === 503 || s === 'FST_ERR_REOPENED_CLOSE_SERVER'), `close at turn ${closeAt}: ${statuses.join(' ')}`)
    const db = new Database(join(dir, 'agent-host.db'), { readonly: true })
    t.same(db.prepare("SELECT request_id, state FROM runs WHERE state <> 'ended'").all(), [], 'no run is left running')
    db.close()
  }
})

t.test('shutdown waits for a submission whose run is still being stored, and ends that run "shutdown" while storage is open', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const body = envelope(SCRIPTED, { script: [{ op: 'markdown', content: 'working' }, { op: 'wait_abort' }] }) as unknown as ServiceRequest
  let settled = false
  const submitted = app.assist.submit(body, { identity: ANONYMOUS, delivery: 'request_response' }).finally(() => { settled = true })
  await app.assist.shutdown(5000)
  t.ok(settled, 'the submission settled before shutdown resolved')
  t.equal((await submitted).outcome, 'started')
  t.match(app.ledger.get(body.request_id), { state: 'ended', end_reason: 'shutdown' }, 'its run was ended and recorded while storage was open')
})

t.test('a run whose end cannot be recorded nor read back still answers with what it produced', async (t) => {
  const app = await build(t)
  const store = app.ledger
  const { finish, get } = store
  t.teardown(() => { store.finish = finish; store.get = get })
  store.finish = () => { throw new Error('disk gone') }
  const body = envelope(AGENTS.echo) as unknown as ServiceRequest
  const submission = await app.assist.submit(body, { identity: ANONYMOUS, delivery: 'request_response' })
  store.get = () => { throw new Error('disk gone') }
  const answer = await app.assist.answer(submission.requestId)
  store.get = get
  t.equal(answer.status, 200)
  t.match(answer.body, { request_id: body.request_id, output: { echo: 'hello world' } })
})
