import t from 'tap'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildApp } from '../../src/app.js'
import { envelope, FIXTURE_AGENTS_DIR, SCRIPTED, testConfig, type Teardown } from '../helper.js'
import { FILESYSTEM_BIN, NO_COVERAGE, serversFile, tempDir } from '../fixtures/tools/servers.js'

// Issue 31: a run ended by an error the agent meant for its caller (a SafeAgentError, as
// file-digest throws for a path outside the fs tool's scope: the caller's mistake) is logged at
// warn without a stack; an agent that crashes (any other error) is still logged at error with its
// stack, which is what its author needs.

type Line = Record<string, unknown> & { level: number, msg: string }

async function app (t: Teardown, env: Record<string, string>): Promise<{ app: Awaited<ReturnType<typeof buildApp>>, lines: Line[] }> {
  const lines: Line[] = []
  const built = await buildApp(testConfig(t, { LOG_LEVEL: 'info', WORKERS_PER_TYPE: '0', ...env }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } })
  t.teardown(() => built.close())
  return { app: built, lines }
}

/** The lines a run's failure logged (at warn or above; not the access log's). */
const failures = (lines: Line[]): Line[] => lines.filter((l) => l.level >= 40 && /agent/.test(l.msg))

t.test('a scope_violation the agent reports to its caller (file-digest, a path outside the tool\'s scope): warn, no stack', async (t) => {
  const root = tempDir(t)
  mkdirSync(join(root, 'docs'))
  writeFileSync(join(root, 'docs/a.md'), '# a\n')
  const servers = serversFile(t, {
    fs: { command: FILESYSTEM_BIN, args: [join(root, 'docs')], env: NO_COVERAGE, agents: ['file-digest'], actions: { read: 'read_text_file' }, scope: { root: join(root, 'docs'), paths: ['**/*.md'] } }
  })
  const a2a = join(tempDir(t), 'a2a-agents.json')
  // never called: the scope check refuses the read first
  writeFileSync(a2a, JSON.stringify({ agents: { summarizer: { card_url: 'http://127.0.0.1:9/a2a/digest/.well-known/agent-card.json', capabilities: ['digest'], callers: ['file-digest'] } } }))
  const { app: server, lines } = await app(t, { MCP_SERVERS_FILE: servers, A2A_AGENTS_FILE: a2a })

  const res = await server.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope('8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a15', { path: '../package.json' }) })
  t.match(res.body, /scope_violation/, 'the caller is told why')
  const logged = failures(lines)
  t.equal(logged.length, 1, JSON.stringify(logged))
  t.match(logged[0], { level: 40, agent: 'file-digest', error: { name: 'SafeAgentError', message: /^cannot read \.\.\/package\.json: scope_violation/ } }, 'at warn, with the message the caller got')
  t.notMatch(JSON.stringify(logged[0]), /"stack"|\n {4}at /, 'no stack trace')
})

t.test('an agent that crashes is logged at error with its stack; a SafeAgentError and a BackendError at warn without', async (t) => {
  const { app: server, lines } = await app(t, { AGENTS_DIR: FIXTURE_AGENTS_DIR })
  const run = async (step: Record<string, unknown>): Promise<Line[]> => {
    lines.length = 0
    const res = await server.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(SCRIPTED, { script: [step] }) })
    t.equal(res.statusCode, 502, `${JSON.stringify(step)}: the run failed`)
    return failures(lines)
  }

  const crash = await run({ op: 'throw', message: 'undefined is not a function, say' })
  t.equal(crash.length, 1)
  t.match(crash[0], { level: 50, msg: 'agent failed', err: { type: 'Error', message: 'undefined is not a function, say', stack: /\n {4}at / } }, 'a crash: error, with the stack')

  const safe = await run({ op: 'throw', safe: true, message: 'no such city' })
  t.equal(safe.length, 1)
  t.match(safe[0], { level: 40, error: { name: 'SafeAgentError', message: 'no such city' } })
  t.notMatch(JSON.stringify(safe[0]), /"stack"/, 'a SafeAgentError: no stack')

  const backend = await run({ op: 'backend_error', code: 'backend_timeout', severity: 'TRANSIENT' })
  t.equal(backend.length, 1)
  t.match(backend[0], { level: 40, error: { name: 'BackendError', message: 'the backend broke' } })
  t.notMatch(JSON.stringify(backend[0]), /"stack"/, 'a BackendError: no stack')
})
