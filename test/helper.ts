import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import type Database from 'better-sqlite3'
import type { SqliteGroupWriter } from '../src/storage/sqlite/group-writer.js'
import type { SqliteSessionStore } from '../src/storage/sqlite/sessions.js'
import { SqliteRunStore } from '../src/storage/sqlite/runs.js'
import type { SqliteAuditLog } from '../src/storage/sqlite/audit.js'
import type { SqliteStores } from '../src/storage/sqlite/index.js'
import { buildApp } from '../src/app.js'
import { loadConfig, type Config } from '../src/config.js'
import { checkServiceResponse } from './sse.js'

/** Fixed ids of the example agents in agents/. */
export const AGENTS = {
  echo: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01',
  ask: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a0e',
  echoStream: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02',
  showcase: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a03',
  llmChat: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06',
  cliAgent: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a07',
  research: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a10',
  planner: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a11',
  refactor: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a12',
  evaluator: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a13',
  digest: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a14',
  fileDigest: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a15'
} as const

/** The scripted test agent (test/fixtures/agents/scripted): it runs `payload.script`. */
export const SCRIPTED = 'f0000000-0000-4000-8000-000000000002'

/** A script for {@link SCRIPTED} that streams `count` deltas on one stream, `ms` apart (a run that is still going when the test acts). */
export function streamingScript (count: number, ms: number): Array<Record<string, unknown>> {
  return [{ op: 'open', name: 's' }, ...Array.from({ length: count }, (_, i) => [{ op: 'write', name: 's', chunk: `w${i} ` }, { op: 'sleep', ms }]).flat()]
}

/** Test-only agents (test/fixtures/agents). */
export const FIXTURE_AGENTS_DIR = fileURLToPath(new URL('./fixtures/agents/', import.meta.url))

/** A folder of broken agents, one per case (test/fixtures/broken/<case>). */
export function brokenAgentsDir (name: string): string {
  return fileURLToPath(new URL(`./fixtures/broken/${name}/`, import.meta.url))
}

/** The part of a tap test the helpers need. */
export interface Teardown { teardown: (fn: () => unknown) => void }

/** A fresh temporary DATA_DIR, removed after the test. */
export function tempDataDir (t: Teardown): string {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-test-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * What every test server runs with unless a test says otherwise: no load shedding on event-loop delay
 * (MAX_EVENT_LOOP_DELAY_MS 0). A test machine running three files at a time is loaded, not a server
 * under pressure, and a 503 there is a false failure; the tests of load shedding set their own.
 */
export const TEST_ENV: Readonly<Record<string, string>> = { MAX_EVENT_LOOP_DELAY_MS: '0' }

/** Configuration for tests: a temp DATA_DIR, silent logs, {@link TEST_ENV}, plus `env`. */
export function testConfig (t: Teardown, env: Record<string, string> = {}): Config {
  return loadConfig({ DATA_DIR: tempDataDir(t), LOG_LEVEL: 'silent', ...TEST_ENV, ...env })
}

/** Build an app on a temp DATA_DIR (closed after the test). */
export async function build (t: Teardown, env: Record<string, string> = {}): Promise<FastifyInstance> {
  const app = await buildApp(testConfig(t, env))
  t.teardown(() => app.close())
  return app
}

/** Build an app and listen on a random loopback port; returns the app and its base URL. */
export async function listen (t: Teardown, env: Record<string, string> = {}): Promise<{ app: FastifyInstance, url: string, port: number }> {
  const app = await build(t, env)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return { app, url: `http://127.0.0.1:${address.port}`, port: address.port }
}

/** A minimal valid CAP envelope for `agentId`, with `payload` as the agent's arguments. */
export function envelope (agentId: string, payload: Record<string, unknown> = { query: 'hello world' }, extra: {
  requestId?: string
  sessionId?: string
  agentRequest?: Record<string, unknown>
} = {}): {
    request_id: string
    context: Record<string, unknown> & { session_id: string, agent_id: string }
    payload: Record<string, unknown> & { session_id: string, payload: Record<string, unknown> }
  } {
  const sessionId = extra.sessionId ?? randomUUID()
  return {
    request_id: extra.requestId ?? randomUUID(),
    context: {
      session_id: sessionId,
      agent_id: agentId,
      user: { user_id: 'user-1', tier: 'free', locale: 'en-GB' },
      trace: { trace_id: randomUUID(), span_id: randomUUID() },
      permissions: [],
      created_at: '2026-11-22T10:00:00.123+01:00'
    },
    payload: { session_id: sessionId, payload, ...extra.agentRequest }
  }
}

/** A request in the session of `first`, to its agent, that answers its run's questions (`payload.resume`, protocol §5.11); a new request id unless given. */
export function resumeEnvelope (first: ReturnType<typeof envelope>, resume: Array<{ interrupt_id: string, value: unknown }>, requestId = randomUUID()): ReturnType<typeof envelope> {
  return envelope(first.context.agent_id, { resume }, { sessionId: first.context.session_id, requestId })
}

/** POST `body` to `/v1/assist` for its JSON answer: anything but a 200 throws; the answer is checked against ServiceResponse (its transcript too while the run waits for an answer). */
export async function assistJson (app: FastifyInstance, body: object): Promise<Record<string, unknown>> {
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: body as Record<string, unknown> })
  if (res.statusCode !== 200) throw new Error(`${res.statusCode}: ${res.body}`)
  const answer = res.json() as Record<string, unknown>
  return checkServiceResponse(answer, 'interrupts' in answer) as unknown as Record<string, unknown>
}

/** The stores of an app built on SQLite (tests that look at or tamper with its file). */
export function sqliteStores (app: FastifyInstance): SqliteStores {
  if (app.stores.driver !== 'sqlite') throw new Error('this test needs the SQLite backend')
  return app.stores as SqliteStores
}

/** The SQLite database of an app built on SQLite (tests that look at or tamper with its file). */
export function sqliteDb (app: FastifyInstance): Database.Database {
  return sqliteStores(app).db
}

/** The group writer of an app built on SQLite. */
export function sqliteWriter (app: FastifyInstance): SqliteGroupWriter {
  return sqliteStores(app).writer
}

/** The session store of an app built on SQLite (its search index is SQLite's own). */
export function sqliteSessions (app: FastifyInstance): SqliteSessionStore {
  return sqliteStores(app).sessions
}

/** The run store of an app built on SQLite, read synchronously. */
export function sqliteRuns (app: FastifyInstance): SqliteRunStore {
  return new SqliteRunStore(sqliteDb(app))
}

/** The audit log of an app built on SQLite, read synchronously. */
export function sqliteAudit (app: FastifyInstance): SqliteAuditLog {
  return sqliteStores(app).audit
}
