import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { openDatabase } from '../../src/storage/database.js'
import { EventStore } from '../../src/storage/events.js'
import { FileTaskStore } from '../../src/runtime/file-task-store.js'
import { AgentRuntime } from '../../src/runtime/agent-runtime.js'
import { Narrator } from '../../src/runtime/narrator.js'
import { Reaper } from '../../src/runtime/reaper.js'
import { build, envelope, FIXTURE_AGENTS_DIR, SCRIPTED, tempDataDir, type Teardown } from '../helper.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

function setup (t: Teardown) {
  const dir = tempDataDir(t)
  const db = openDatabase(dir)
  t.teardown(() => db.close())
  const events = new EventStore(db)
  const store = new FileTaskStore(dir, { retryBaseMs: 10, retryCapMs: 20 })
  const runtime = new AgentRuntime({ agentId: 'w', agentType: 'count', store, events, heartbeatMs: 1000, leaseMs: 5000 })
  return { dir, db, events, store, runtime }
}

const narrations = (events: EventStore, conversation: string): string[] =>
  events.list({ session_id: conversation, type: 'NARRATION', limit: 1000 }).map((e) => String(e.event.text))

async function until (what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  for (const deadline = Date.now() + ms; !await check(); await sleep(20)) if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
}

t.test('the narrator follows the event log: each task result and each stall is narrated once, by whichever narrator gets there first', async (t) => {
  const { db, events, store, runtime } = setup(t)
  const first = new Narrator(events, db)
  const second = new Narrator(events, db)
  await store.create([{ id: 'a', type: 'count', metadata: { conversation_id: 'c1' } }, { id: 'b', type: 'count', metadata: { conversation_id: 'c2' } }])
  await runtime.claimTask()
  await runtime.completeTask('a', { task_id: 'a', outcome: 'completed' })
  t.equal(first.follow() + second.follow(), 1, 'two narrators on one database: one narration')
  t.same(narrations(events, 'c1'), ['count a is done.'])
  // a stall the reaper found (its event is the host's, like a worker's result from another process)
  const stalled = new AgentRuntime({ agentId: 'gone', agentType: 'count', store, events, heartbeatMs: 1000, leaseMs: 1 })
  await stalled.claimTask()
  await sleep(5)
  await new Reaper(store, events).reap()
  t.equal(second.follow(), 1)
  t.same(narrations(events, 'c2'), ['count b stopped responding; it has been handed to another worker.'])
  t.equal(first.follow(), 0, 'nothing new')
  // a restart: a new narrator on the same database narrates nothing again
  t.equal(new Narrator(events, db).follow(), 0)
  t.same(narrations(events, 'c1'), ['count a is done.'], 'said once')
})

// Regression: a CAP agent's response.emit({ type: 'AGENT_RESULT', ... }) produced a user-visible NARRATION.
t.test('an agent\'s CloudEvent named like a task result is the agent\'s event: the narrator neither hears nor repeats it', async (t) => {
  const app = await build(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const sessionId = '5e550000-0000-4000-8000-00000000aa01'
  const event = { specversion: '1.0', id: 'ev-1', source: 'agents/scripted', type: 'AGENT_RESULT', data: { task_id: 'x', outcome: 'completed' } }
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [{ op: 'emit', event }] }, { sessionId }) })
  t.equal(res.statusCode, 200)
  t.equal(app.events.list({ session_id: sessionId, type: 'AGENT_RESULT' }).length, 1, 'stored, as the agent\'s event')
  t.equal(app.narrator.follow(), 0)
  app.narrator.narrate(sessionId, 'user_waiting')
  t.same(narrations(app.events, sessionId), ['Still working on it.'], 'and not described when the conversation is narrated')
})

// Regression: tasks finished by `agent-host worker` processes were never narrated (0 NARRATION events
// for 1 600 worker-completed conversation tasks): the narrator only heard its own process.
t.test('a task finished by an agent-host worker process is narrated by the server', async (t) => {
  const dir = tempDataDir(t)
  const app = await build(t, { DATA_DIR: dir, AGENTS_DIR: FIXTURE_AGENTS_DIR, WORKERS_PER_TYPE: '0', TASK_POLL_MS: '50' })
  await app.tasks.create([{ id: 'far', type: 'sleep', inputs: { ms: 10 }, metadata: { conversation_id: 'remote-talk' } }])
  const child = spawn(process.execPath, [...process.execArgv, 'src/cli.ts', 'worker', '--type', 'sleep'], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dir, AGENTS_DIR: FIXTURE_AGENTS_DIR, TASK_POLL_MS: '30', LOG_LEVEL: 'silent' },
    stdio: 'ignore'
  })
  t.teardown(() => { child.kill('SIGKILL') })
  await until('the narration', () => narrations(app.events, 'remote-talk').length > 0)
  t.same(narrations(app.events, 'remote-talk'), ['sleep far: assigned\nsleep far is done.'])
})
