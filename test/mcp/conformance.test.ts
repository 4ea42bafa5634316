// Heavy: the official MCP conformance suite is a command-line program, run once per scenario (four at
// a time) against a server listening on loopback. It needs Node.js 22 or newer (fs.globSync), so on
// Node.js 20 this file skips, and .ci/run runs it in its Node.js 24 pass.
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { stripVTControlCharacters } from 'node:util'
import { harnessFreeEnv } from '../child-env.js'
import { listen } from '../helper.js'

/** The conformance pack: one agent per tool the suite's server scenarios call. */
const PACK = fileURLToPath(new URL('../../examples/mcp-conformance/', import.meta.url))

/**
 * The suite's command-line program (`conformance`), as its package names it. It is no dependency of
 * the project (it and its dependencies need Node.js 22, the project admits 20): .ci/run installs it,
 * pinned, into its Node.js 24 copy (`npm install --no-save @modelcontextprotocol/conformance@0.1.16`).
 */
const SUITE = ((): string | undefined => {
  try {
    return join(createRequire(import.meta.url).resolve('@modelcontextprotocol/conformance/package.json'), '..', 'dist', 'index.js')
  } catch {
    return undefined
  }
})()

const NODE_MAJOR = Number(process.versions.node.split('.')[0])

/** The server scenarios run besides every `tools-call-*` one. */
const SCENARIOS = ['server-initialize', 'tools-list', 'ping', 'logging-set-level', 'server-sse-multiple-streams', 'server-sse-polling', 'dns-rebinding-protection']

/**
 * Scenarios known not to pass yet, each with why. One of them that passes fails this file, as the
 * suite's own `--expected-failures` baseline does: take it off the list.
 */
const EXPECTED_FAILURES: Readonly<Record<string, string>> = {}

/** How long one scenario may take (the suite's own waits are up to 10 s). */
const SCENARIO_TIMEOUT_MS = 30_000

/** Scenarios run at once. */
const CONCURRENCY = 4

/** One check of a scenario, as the suite writes it to `checks.json`. */
interface Check {
  id: string
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED'
  description: string
  errorMessage?: string
}

/** What one run of the suite's program left: its checks (none when it did not write them) and its output. */
interface Outcome {
  checks: Check[]
  output: string
}

/** Run the suite's program with `args` (`cwd`: where it may write); resolves with its output whatever its exit. */
async function suite (args: string[], cwd: string): Promise<string> {
  return await new Promise((resolve) => {
    execFile(process.execPath, [SUITE as string, ...args], { cwd, env: harnessFreeEnv(), timeout: SCENARIO_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const how = err === null ? '' : `\n(exit ${String(err.code ?? err.signal)}${err.killed ? `: killed after ${SCENARIO_TIMEOUT_MS} ms` : ''})`
      resolve(stripVTControlCharacters(`${stdout}${stderr}${how}`))
    })
  })
}

/** Run one server scenario against `url`, with its checks from the results folder the suite writes. */
async function scenario (name: string, url: string): Promise<Outcome> {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-conformance-'))
  try {
    const output = await suite(['server', '--url', url, '--scenario', name, '--output-dir', dir], dir)
    const results = readdirSync(dir).filter((entry) => entry.startsWith(`server-${name}`))
    const checks = results.length === 1 ? JSON.parse(readFileSync(join(dir, results[0] as string, 'checks.json'), 'utf8')) as Check[] : []
    return { checks, output }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** Why a scenario's checks do not pass: a failure, a warning (a SHOULD it misses), or no check that succeeded at all; undefined when they pass. */
function shortfall (checks: Check[]): string | undefined {
  const bad = checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
  if (bad.length > 0) return bad.map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description}`).join('; ')
  if (!checks.some((c) => c.status === 'SUCCESS')) return 'no check succeeded'
  return undefined
}

/** `run` of each of `names`, at most `limit` at a time, each promise settling as its run ends. */
function pooled<T> (names: string[], limit: number, run: (name: string) => Promise<T>): Map<string, Promise<T>> {
  const waiting: Array<() => void> = []
  let running = 0
  const slot = async (): Promise<void> => {
    if (running < limit) { running++; return }
    await new Promise<void>((resolve) => { waiting.push(resolve) })
  }
  const free = (): void => {
    const next = waiting.shift()
    if (next === undefined) running--
    else next()
  }
  return new Map(names.map((name) => [name, slot().then(async () => await run(name)).finally(free)]))
}

t.test('the official MCP conformance suite\'s server scenarios pass against /mcp serving examples/mcp-conformance', {
  skip: NODE_MAJOR < 22
    ? `the suite needs Node.js 22 or newer and this is ${process.version}: .ci/run runs it in its Node.js 24 pass`
    : SUITE === undefined ? 'the suite is not installed: npm install --no-save @modelcontextprotocol/conformance@0.1.16 (.ci/run does, for its Node.js 24 pass)' : false
}, async (t) => {
  const listed = await suite(['list'], tmpdir())
  const server = listed.slice(listed.indexOf('Server scenarios'), listed.indexOf('Client scenarios'))
  const toolCalls = [...server.matchAll(/^\s+- (tools-call-\S+)/gm)].map((m) => m[1] as string)
  t.ok(toolCalls.length >= 10, `the suite lists its tools-call-* scenarios: ${toolCalls.join(', ')}`, { output: listed })

  // AUTH_MODE off: the suite's client sends no Authorization header (and dns-rebinding-protection is
  // about a loopback server without authentication)
  const { url } = await listen(t, { AGENTS_DIR: PACK })
  const names = [...toolCalls, ...SCENARIOS]
  // a run that throws is an outcome too: no promise here may reject before its test awaits it
  const outcomes = pooled(names, CONCURRENCY, async (name) => await scenario(name, `${url}/mcp`).catch((err: unknown) => ({ checks: [], output: String(err) })))
  for (const name of names) {
    await t.test(name, async (t) => {
      const { checks, output } = await (outcomes.get(name) as Promise<Outcome>)
      t.ok(checks.length > 0, 'the suite wrote its checks', { output })
      const why = shortfall(checks)
      const expected = EXPECTED_FAILURES[name]
      if (expected === undefined) {
        t.equal(why, undefined, `${name} passes`, { output })
      } else {
        t.not(why, undefined, `${name} is expected to fail (${expected}); if it passes now, take it off EXPECTED_FAILURES`, { output })
        t.comment(`${name}: fails as expected (${expected}): ${why ?? ''}`)
      }
    })
  }
})
