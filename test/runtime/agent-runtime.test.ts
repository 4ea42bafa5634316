import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { openDatabase } from '../../src/storage/sqlite/database.js'
import { SqliteAuditLog } from '../../src/storage/sqlite/audit.js'
import { SqliteEventStore } from '../../src/storage/sqlite/events.js'
import { FileTaskStore } from '../../src/storage/file/tasks.js'
import { AgentRuntime, type AgentResult } from '../../src/runtime/agent-runtime.js'
import { BaseAgent, type TaskContext } from '../../src/runtime/base-agent.js'
import { AgentError } from '../../src/agents/index.js'
import type { AgentError as AgentErrorType } from '../../src/errors.js'
import type { TaskNode } from '../../src/storage/tasks/task.js'
import { tempDataDir, type Teardown } from '../helper.js'
import { until } from '../socket.js'

function setup (t: Teardown, options: { heartbeatMs?: number, leaseMs?: number } = {}) {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  t.teardown(() => db.close())
  const events = new SqliteEventStore(db)
  const audit = new SqliteAuditLog(db)
  const store = new FileTaskStore(dir, { retryBaseMs: 20, retryCapMs: 40 })
  const runtime = new AgentRuntime({ agentId: 'agent-1', agentType: 'count', store, events, audit, heartbeatMs: options.heartbeatMs ?? 1000, leaseMs: options.leaseMs ?? 5000 })
  return { store, events, audit, runtime, db }
}

class Recorder extends BaseAgent {
  readonly agentType = 'count'
  readonly calls: string[] = []
  constructor (readonly behaviour: (task: TaskNode, context: TaskContext) => Promise<AgentResult>) { super() }
  override async onAssign (task: TaskNode, runtime: AgentRuntime): Promise<void> { this.calls.push('assign'); await super.onAssign(task, runtime) }
  override async onProgress (task: TaskNode, runtime: AgentRuntime, message: string, fraction?: number): Promise<void> { this.calls.push(`progress:${message}`); await super.onProgress(task, runtime, message, fraction) }
  override async onComplete (): Promise<void> { this.calls.push('complete') }
  override async onError (_task: TaskNode, _runtime: AgentRuntime, error: AgentErrorType): Promise<void> { this.calls.push(`error:${error.reason}`) }
  async handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult> { return await this.behaviour(task, context) }
}

t.test('executeOnce: claim, hooks, events, completion (S34)', async (t) => {
  const { store, events, runtime } = setup(t)
  await store.create([{ id: 'c1', type: 'count', inputs: { text: 'a b c' }, metadata: { conversation_id: 'conv' } }])
  const agent = new Recorder(async (task, context) => {
    await context.progress('counting', 0.5)
    return { task_id: task.id, outcome: 'completed', artifacts: [{ words: 3 }], notes: 'done' }
  })
  const done = await agent.executeOnce(runtime)
  t.match(done, { id: 'c1', status: 'COMPLETED', owner: 'agent-1', outputs: { outcome: 'completed', artifacts: [{ words: 3 }], notes: 'done' } })
  t.same(agent.calls, ['assign', 'progress:counting', 'complete'])
  const log = events.list({ session_id: 'conv' })
  t.same(log.map((e) => [e.type, e.visibility, e.kind]), [['AGENT_UPDATE', 'internal', 'task'], ['AGENT_UPDATE', 'internal', 'task'], ['AGENT_RESULT', 'internal', 'task']])
  t.match(log[1]?.event, { task_id: 'c1', message: 'counting', progress: 0.5, attempt: 1 })
  t.equal(await agent.executeOnce(runtime), null, 'null when there is no work')
})

t.test('failures: AgentError carries retryable; any other error is retried; attempts run out', async (t) => {
  const { store, events, runtime } = setup(t)
  await store.create([{ id: 'hard', type: 'count' }, { id: 'soft', type: 'count', max_attempts: 2 }])
  const fatal = new Recorder(async () => { throw new AgentError('bad input', { retryable: false, details: { field: 'text' } }) })
  t.match(await fatal.executeOnce(runtime), { id: 'hard', status: 'FAILED', error: { reason: 'bad input', retryable: false, details: { field: 'text' } } })
  t.same(fatal.calls, ['assign', 'error:bad input'])
  const crashing = new Recorder(async () => { throw new TypeError('undefined is not a function') })
  const retried = await crashing.executeOnce(runtime)
  t.match(retried, { id: 'soft', status: 'PENDING', error: { reason: 'undefined is not a function', retryable: true } })
  await sleep(50)
  t.match(await crashing.executeOnce(runtime), { id: 'soft', status: 'FAILED', attempt: 2 })
  t.match(events.list({ type: 'AGENT_RESULT' }).map((e) => e.event.outcome), ['failed', 'failed', 'failed'])
})

t.test('emitUpdate persists the heartbeat and extends the lease; heartbeatDue (S35)', async (t) => {
  const { store, runtime } = setup(t, { heartbeatMs: 100, leaseMs: 300 })
  await store.create([{ id: 'h', type: 'count' }])
  const claimed = await runtime.pollNextTask()
  t.same(runtime.tokenOf('h'), { owner: 'agent-1', attempt: 1 })
  await sleep(20)
  const updated = await runtime.emitUpdate('h', 'still here', 0.1)
  t.ok(Date.parse(updated.last_heartbeat_at ?? '') > Date.parse(claimed?.last_heartbeat_at ?? ''))
  t.ok(Date.parse(updated.lease_expires_at ?? '') > Date.parse(claimed?.lease_expires_at ?? ''))
  t.equal(runtime.heartbeatDue(Date.now()), false)
  t.equal(runtime.heartbeatDue(Date.now() - 100), true)
  t.equal(runtime.heartbeatDue(new Date(Date.now() - 500).toISOString()), true)
  const again = await runtime.heartbeat('h')
  t.equal(again.status, 'IN_PROGRESS')
})

t.test('next_actions become child tasks of the finished one', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 'parent', type: 'count', priority: 3, metadata: { conversation_id: 'c' } }])
  await runtime.claimTask()
  await runtime.completeTask('parent', { task_id: 'parent', outcome: 'completed', next_actions: [{ type: 'summarize', inputs: { from: 'parent' } }] })
  const [child] = await store.list({ type: 'summarize' })
  t.match(child, { parent_id: 'parent', inputs: { from: 'parent' }, priority: 3, metadata: { conversation_id: 'c' }, status: 'PENDING' })
})

t.test('the heartbeat keeps a long task\'s lease alive; a lost claim is stale, changes nothing and is audited', async (t) => {
  const { store, runtime, audit } = setup(t, { heartbeatMs: 30, leaseMs: 300 })
  await store.create([{ id: 'long', type: 'count' }, { id: 'lost', type: 'count' }])
  const agent = new Recorder(async (task) => {
    // past the lease the task holds now, alive only because heartbeats renewed it; the reaper is
    // asked right after a heartbeat lands, so that a starved machine's pause between two
    // heartbeats (a real one, not the agent's fault) is not taken for a missing heartbeat
    const held = Date.parse((await store.get(task.id))?.lease_expires_at as string)
    await until('the first lease is past', () => Date.now() > held + 30, 10_000, 10)
    const seen = (await store.get(task.id))?.last_heartbeat_at
    await until('a heartbeat after it', async () => (await store.get(task.id))?.last_heartbeat_at !== seen, 10_000, 5)
    t.same(await store.reap(), [], 'never reaped while heartbeats flow')
    return { task_id: task.id, outcome: 'completed' }
  })
  t.equal((await agent.executeOnce(runtime))?.status, 'COMPLETED')

  // claimed, and no heartbeat: reaped once its lease is past, and taken by another worker
  const lost = await runtime.claimTask()
  await until('the lost claim\'s lease is past', () => Date.now() > Date.parse(lost?.lease_expires_at as string), 10_000, 10)
  t.equal((await store.reap())[0]?.id, 'lost')
  const thief = new AgentRuntime({ agentId: 'agent-2', agentType: 'count', store, events: { append: () => 0 } })
  let taken: TaskNode | undefined
  await until('the thief claims it once its retry backoff is past', async () => { taken = await thief.claimTask(); return taken !== undefined }, 10_000, 10)
  t.equal(taken?.attempt, 2)
  await t.rejects(runtime.completeTask('lost', { task_id: 'lost', outcome: 'completed' }), { code: 'AH_ERR_TASK_STALE_CLAIM', statusCode: 409 })
  t.match(await store.get('lost'), { owner: 'agent-2', attempt: 2, status: 'IN_PROGRESS' })
  t.match(audit.list({ action: 'task.complete.stale' }), [{ actor: 'agent-1', resource: 'lost', success: false, details: { attempt: 1 } }])
})

t.test('cancel reaches the running handler through its signal', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 'x', type: 'count' }])
  let sawAbort = false
  const agent = new Recorder(async (_task, context) => {
    // the abort may come before the handler listens (20 ms is not long on a loaded machine)
    await new Promise((resolve) => { if (context.signal.aborted) resolve(undefined); else context.signal.addEventListener('abort', resolve, { once: true }) })
    sawAbort = true
    throw new AgentError('cancelled', { retryable: false })
  })
  // as the worker pool cancels one task: through the controller it is handed when the task is claimed
  const done = await agent.executeOnce(runtime, undefined, (_task, controller) => {
    setTimeout(() => { controller.abort(new Error('cancelled')) }, 20)
    return () => {}
  })
  t.ok(sawAbort)
  t.equal(done?.status, 'FAILED')
})

t.test('a claim made as the worker is told to stop is handed an aborted signal', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 'late', type: 'count' }])
  const controller = new AbortController()
  controller.abort(new Error('shutting down'))
  const agent = new Recorder(async (_task, context) => {
    t.ok(context.signal.aborted)
    throw new AgentError('stopped', { retryable: true })
  })
  t.match(await agent.executeOnce(runtime, controller.signal), { status: 'PENDING', attempt: 0 }, 'given back: the attempt does not count')
})

t.test('executeOnce settles a heartbeat in flight before it ends the attempt: its own heartbeat is never refused as stale', async (t) => {
  for (const [outcome, status] of [['completed', 'COMPLETED'], ['failed', 'FAILED']] as const) {
    const { store, runtime, audit } = setup(t, { heartbeatMs: 10, leaseMs: 5000 })
    await store.create([{ id: 'hb', type: 'count', max_attempts: 1 }])
    let inFlight = 0
    let overlapped = false
    const heartbeat = store.heartbeat.bind(store)
    store.heartbeat = async (...args) => {
      inFlight++
      try {
        await sleep(60)
        return await heartbeat(...args)
      } finally {
        inFlight--
      }
    }
    const agent = new Recorder(async (task) => {
      // end while a heartbeat is in flight (waiting for one, however loaded the machine)
      const deadline = Date.now() + 5000
      const running = (): number => inFlight
      while (running() === 0 && Date.now() < deadline) await sleep(2)
      overlapped = inFlight > 0
      if (outcome === 'failed') throw new AgentError('no', { retryable: false })
      return { task_id: task.id, outcome }
    })
    t.equal((await agent.executeOnce(runtime))?.status, status, outcome)
    t.ok(overlapped, `${outcome}: a heartbeat was running when the handler ended`)
    t.equal(inFlight, 0, `${outcome}: and it had settled before executeOnce returned`)
    t.same(audit.list({ limit: 1000 }).filter((row) => row.action.endsWith('.stale')).map((row) => row.action), [], `${outcome}: the heartbeat reached the store before the attempt ended, not after it`)
  }
})

t.test('guardrails (S36): task events are internal; render_to_user anywhere is refused; only the narrator speaks to users', async (t) => {
  const { events, store, runtime } = setup(t)
  const base = { kind: 'task' as const, id: 'e', source: 's', time: new Date().toISOString() }
  const seq = events.append({ ...base, type: 'AGENT_UPDATE', visibility: 'user', event: { message: 'hi' } }, 'narrator')
  t.equal(events.list({ after: seq - 1 })[0]?.visibility, 'internal', 'forced internal, even for the narrator')
  for (const event of [{ render_to_user: true }, { deep: { list: [{ render_to_user: 'yes' }] } }]) {
    t.throws(() => events.append({ ...base, type: 'AGENT_RESULT', event }), { code: 'AH_ERR_POLICY_VIOLATION', statusCode: 422, policy_error: true })
  }
  t.doesNotThrow(() => events.append({ ...base, type: 'AGENT_UPDATE', event: { render_to_user: false } }), 'a falsy flag is fine')
  t.throws(() => events.append({ ...base, type: 'NARRATION', visibility: 'user', event: {} }), { code: 'AH_ERR_POLICY_VIOLATION', message: /only the narrator/ })
  t.throws(() => events.append({ ...base, type: 'NARRATION', visibility: 'user', event: {} }, 'host'), { code: 'AH_ERR_POLICY_VIOLATION' })
  const narrated = events.append({ ...base, type: 'NARRATION', visibility: 'user', event: { text: 'Working on it' } }, 'narrator')
  t.equal(events.list({ after: narrated - 1 })[0]?.visibility, 'user')
  const before = events.list({ limit: 1000 }).length
  await store.create([{ id: 'g', type: 'count' }])
  await runtime.claimTask()
  await t.rejects(runtime.completeTask('g', { task_id: 'g', outcome: 'completed', artifacts: [{ render_to_user: true }] }), { code: 'AH_ERR_POLICY_VIOLATION' })
  t.equal(events.list({ limit: 1000 }).length, before, 'the refused result was not stored')
  t.equal((await store.get('g'))?.status, 'IN_PROGRESS', 'and the task was not changed')
})

t.test('the narrator speaks only when the gate opens, and otherwise records NARRATION_SUPPRESSED', async (t) => {
  const { events, store, runtime, db } = setup(t)
  const { SqliteNarrator } = await import('../../src/storage/sqlite/narrator.js')
  const narrator = new SqliteNarrator(events, db)
  await store.create([{ id: 'n1', type: 'count', metadata: { conversation_id: 'talk' } }])
  await runtime.claimTask()
  await runtime.emitUpdate('n1', 'reading the text', 0.3)
  t.equal(narrator.narrate('talk'), undefined, 'a progress update alone does not open the gate')
  t.equal(events.list({ session_id: 'talk', type: 'NARRATION_SUPPRESSED' }).length, 1)
  const waiting = narrator.narrate('talk', 'user_waiting')
  t.type(waiting, 'number', 'a hint opens it')
  t.match(events.list({ session_id: 'talk', type: 'NARRATION' })[0], { visibility: 'user', event: { text: 'count n1: reading the text', hint: 'user_waiting' } })
  await runtime.completeTask('n1', { task_id: 'n1', outcome: 'completed' })
  t.type(narrator.narrate('talk'), 'number', 'a recent AGENT_RESULT opens it')
  t.match(events.list({ session_id: 'talk', type: 'NARRATION' })[1]?.event, { text: 'count n1 is done.' })
  t.equal(narrator.narrate('talk'), undefined, 'nothing new since: suppressed')
  t.type(narrator.narrate('quiet', 'task_completed'), 'number')
  t.match(events.list({ session_id: 'quiet', type: 'NARRATION' })[0]?.event, { text: 'Update on your request.' })
  await store.create([{ id: 'n2', type: 'count', metadata: { conversation_id: 'talk' } }])
  await runtime.claimTask()
  await runtime.failTask('n2', { reason: 'no text', retryable: true })
  narrator.narrate('talk', 'agent_failed')
  t.match(events.list({ session_id: 'talk', type: 'NARRATION' })[2]?.event, { text: 'count n2 failed: no text (it will be retried)' })
})

// Regression: a result carrying render_to_user deep in an artifact ran the handler 3 times, called
// onComplete and then onError, and ended FAILED with retryable: true.
t.test('a result the policy refuses fails the task at once, not retryable, and only onError runs', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 'p', type: 'count', max_attempts: 3 }])
  let runs = 0
  const agent = new Recorder(async (task) => {
    runs++
    return { task_id: task.id, outcome: 'completed', artifacts: [{ deep: { list: [{ render_to_user: true }] } }] }
  })
  t.match(await agent.executeOnce(runtime), { id: 'p', status: 'FAILED', attempt: 1, error: { reason: 'policy_violation', retryable: false } })
  t.equal(await agent.executeOnce(runtime), null, 'nothing left to retry')
  t.equal(runs, 1)
  t.same(agent.calls, ['assign', 'error:policy_violation'], 'onError only: the result was never going to be stored')
})

t.test('once onComplete ran, a completion that cannot be stored does not also run onError', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 'q', type: 'count' }])
  const agent = new Recorder(async (task) => {
    await store.cancel(task.id)
    return { task_id: task.id, outcome: 'completed' }
  })
  await t.rejects(agent.executeOnce(runtime), { code: 'AH_ERR_TASK_STALE_CLAIM' })
  t.same(agent.calls, ['assign', 'complete'])
})

// Regression: a plain-object task agent's onProgress was never called (hooks seen: onAssign, onComplete).
t.test('a plain-object task agent gets every hook it declares, in order', async (t) => {
  const { store, runtime } = setup(t)
  const { asBaseAgent } = await import('../../src/runtime/base-agent.js')
  await store.create([{ id: 'o', type: 'count' }, { id: 'o2', type: 'count', max_attempts: 1 }])
  const calls: string[] = []
  let fail = false
  const agent = asBaseAgent({
    agentType: 'count',
    async onAssign () { calls.push('assign') },
    async onProgress (_task: TaskNode, _runtime: AgentRuntime, message: string) { calls.push(`progress:${message}`) },
    async onComplete () { calls.push('complete') },
    async onError (_task: TaskNode, _runtime: AgentRuntime, error: AgentErrorType) { calls.push(`error:${error.reason}`) },
    async handleTask (task: TaskNode, context: TaskContext) {
      await context.progress('half', 0.5)
      await context.progress('most', 0.9)
      if (fail) throw new Error('boom')
      return { task_id: task.id, outcome: 'completed' as const }
    }
  })
  t.match(await agent.executeOnce(runtime), { id: 'o', status: 'COMPLETED' })
  fail = true
  t.match(await agent.executeOnce(runtime), { id: 'o2', status: 'FAILED' })
  t.same(calls, ['assign', 'progress:half', 'progress:most', 'complete', 'assign', 'progress:half', 'progress:most', 'error:boom'])
})

// Regression: three SIGTERMs took a task from attempt 1/3 to FAILED 3/3 ("The operation was aborted").
t.test('a task stopped by a graceful shutdown goes back to PENDING without using an attempt, and no hook says it failed', async (t) => {
  const { store, runtime } = setup(t)
  await store.create([{ id: 's', type: 'count', max_attempts: 1 }])
  const shutdown = new AbortController()
  const agent = new Recorder(async (_task, context) => {
    shutdown.abort(new Error('shutting down'))
    await sleep(10_000, undefined, { signal: context.signal })
    throw new Error('not reached')
  })
  t.match(await agent.executeOnce(runtime, shutdown.signal), { id: 's', status: 'PENDING', attempt: 0, owner: null })
  t.same(agent.calls, ['assign'])
  const again = new Recorder(async (task) => ({ task_id: task.id, outcome: 'completed' }))
  t.match(await again.executeOnce(runtime), { id: 's', status: 'COMPLETED', attempt: 1 }, 'its one attempt is still there')
})

// regression (issue 28's chaos runs): a database restart between a task's completion and its
// AGENT_RESULT left the task COMPLETED with no result event; the event is now tried again while the
// database is unreachable, and an append whose answer was lost is not written twice
t.test('the AGENT_RESULT of a committed completion is written once, however long the database is away (within the lease)', async (t) => {
  const { store, events } = setup(t)
  await store.create([{ id: 'r1', type: 'count' }, { id: 'r2', type: 'count' }, { id: 'r3', type: 'count' }])
  const away = (): Error => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' })
  let failures = 0
  let lostAnswers = 0
  const flaky = {
    append: (input: Parameters<typeof events.append>[0]) => {
      if (failures > 0) { failures--; throw away() }
      const seq = events.append(input)
      if (lostAnswers > 0) { lostAnswers--; throw away() }
      return seq
    },
    list: (query: Parameters<typeof events.list>[0]) => events.list(query)
  }
  const runtime = new AgentRuntime({ agentId: 'agent-1', agentType: 'count', store, events: flaky, heartbeatMs: 1000, leaseMs: 5000 })
  const results = (id: string): number => events.list({ task_id: id, type: 'AGENT_RESULT' }).length

  failures = 3
  await runtime.claimTask()
  t.match(await runtime.completeTask('r1', { task_id: 'r1', outcome: 'completed' }), { status: 'COMPLETED' })
  t.equal(results('r1'), 1, 'written once the database is back')

  lostAnswers = 1
  await runtime.claimTask()
  await runtime.completeTask('r2', { task_id: 'r2', outcome: 'completed' })
  t.equal(results('r2'), 1, 'an append that committed but whose answer was lost is not written again')

  let tries = 0
  const refusing = new AgentRuntime({ agentId: 'agent-1', agentType: 'count', store, events: { append: () => { tries++; throw new Error('CHECK constraint failed') } }, heartbeatMs: 1000, leaseMs: 5000 })
  await refusing.claimTask()
  await t.rejects(refusing.completeTask('r3', { task_id: 'r3', outcome: 'completed' }), /CHECK constraint failed/)
  t.equal(tries, 1, 'any other error is not tried again')
})
