import t from 'tap'
import { randomUUID } from 'node:crypto'
import { A2A_ERROR_CODE, RequestMalformedError, TaskNotFoundError } from '@a2a-js/sdk/errors'
import { firstEvent, jsonRpcError, restError, restErrorFrame, taskRef, unknownVerb } from '../../src/a2a/http-binding.js'
import { AGENTS, build } from '../helper.js'

const HEADERS = { 'a2a-version': '1.0' }

t.test('a task path is an id and a verb; a verb the binding lacks is a malformed request, over HTTP a 400', async (t) => {
  t.same(taskRef('abc'), { id: 'abc', verb: '' })
  t.same(taskRef('abc:cancel'), { id: 'abc', verb: 'cancel' })
  t.throws(() => unknownVerb('frobnicate'), new RequestMalformedError('Unknown method ":frobnicate" of a task'))
  const app = await build(t)
  for (const method of ['GET', 'POST'] as const) {
    const res = await app.inject({ method, url: `/a2a/${AGENTS.echo}/rest/tasks/${randomUUID()}:frobnicate`, headers: HEADERS })
    t.equal(res.statusCode, 400, method)
    t.match(res.json(), { error: { status: 'INVALID_ARGUMENT', message: /Unknown method ":frobnicate" of a task/ } })
  }
})

t.test('A2A errors are each binding\'s error shapes; any other failure is not theirs to answer', async (t) => {
  const missing = new TaskNotFoundError('Task not found: x')
  t.match(restError(missing), { status: 404, body: { error: { status: 'NOT_FOUND', message: 'Task not found: x' } } })
  t.equal(restError(new Error('disk gone')), undefined, 'the host\'s own errors are answered by its error handler')
  t.match(JSON.parse(restErrorFrame(missing)), { error: { status: 'NOT_FOUND' } }, 'a stream\'s last event')
  t.match(jsonRpcError(7, missing), { jsonrpc: '2.0', id: 7, error: { code: A2A_ERROR_CODE.TASK_NOT_FOUND, message: 'Task not found: x' } })
})

t.test('a stream\'s first event is awaited before any header: a failure then is still a plain answer; later events follow it, and returning ends the source', async (t) => {
  let returned = false
  async function * events (): AsyncGenerator<number, void, undefined> {
    try {
      yield 1
      yield 2
    } finally {
      returned = true
    }
  }
  const started = await firstEvent(events())
  if (!('events' in started)) throw new Error('the first event failed')
  t.same(await started.events.next(), { value: 1, done: false }, 'the first event, once')
  t.same(await started.events.next(), { value: 2, done: false })
  await started.events.return?.(undefined)
  t.ok(returned, 'the source was returned')

  async function * refused (): AsyncGenerator<number, void, undefined> {
    throw new TaskNotFoundError('gone')
  }
  t.match(await firstEvent(refused()), { failed: TaskNotFoundError })
})
