import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { envelope } from '../helper.js'
import { harnessFreeEnv } from '../child-env.js'
import { docBlocks } from '../docs/doc-blocks.js'
import { freePort } from '../socket.js'

// Issue 17: `npm run dev` runs the TypeScript sources, serves a changed agent after a restart, logs
// pretty lines and names .ts files in stacks; issue 31: a restart logs one line, not the whole
// start-up log again, and refuses no connection (the running server answers until its successor
// listens); a change that does not boot leaves the running server serving. How long a restart
// takes is measured by bench/dev-restart.js, not here.
// The agent lives outside the repository and imports 'agent-host' (the `development` condition: the
// sources), as an author's own project would.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const ID = '5d7f0c1e-9b2a-4c3d-8e4f-6a7b8c9d0e1f'

const agent = (version: number): string => `import { defineAgent } from 'agent-host'

export default defineAgent({
  manifest: {
    metadata: { id: '${ID}', name: 'hello', version: '1.0.${version}', author: 'me', created_at: '2026-11-25T00:00:00.000Z' },
    capabilities: [{ name: 'hello', description: 'hello', delivery_mode: 'request_response', inputs: { type: 'object', properties: { fail: { type: 'boolean' } } } }]
  },
  async assist (request, _session, response) {
    if (request.payload.fail === true) throw new Error('broken on purpose')
    await response.result({ version: ${version} })
  }
})
`

t.test('npm run dev: an edited agent is served after a restart, logs are pretty, stacks name .ts files', { timeout: 120_000 }, async (t) => {
  const project = mkdtempSync(join(tmpdir(), 'agent-host-dev-'))
  t.teardown(() => { rmSync(project, { recursive: true, force: true }) })
  mkdirSync(join(project, 'node_modules'))
  symlinkSync(ROOT, join(project, 'node_modules/agent-host'), 'dir')
  writeFileSync(join(project, 'package.json'), '{"type":"module"}')
  mkdirSync(join(project, 'agents/hello'), { recursive: true })
  writeFileSync(join(project, 'agents/hello/index.ts'), agent(1))

  const port = await freePort()
  const env = harnessFreeEnv()
  // the first command of docs/writing-agents.md's scaffold section, as written
  const [command, ...args] = ((docBlocks('docs/writing-agents.md', '## Scaffold an agent, then run it in dev mode')[0] as string).split('\n')[0] as string).replace(/#.*$/, '').trim().split(/\s+/)
  t.same([command, ...args], ['npm', 'run', 'dev'], 'the guide starts the server with npm run dev')
  const dev = spawn(command as string, args, {
    cwd: ROOT,
    env: { ...env, PORT: String(port), AGENTS_DIR: join(project, 'agents'), DATA_DIR: join(project, 'data'), AUDIT_KEY: 'k'.repeat(32), WORKERS_PER_TYPE: '0', FORCE_COLOR: '0', RATE_LIMIT_MAX: '0' }, // the test polls faster than a caller may call
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  })
  let output = ''
  dev.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  dev.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const exited = new Promise((resolve) => dev.once('exit', resolve))
  t.teardown(async () => {
    try { process.kill(-(dev.pid as number), 'SIGTERM') } catch {}
    await exited
  })

  /** Connections refused (ECONNREFUSED): what a restart must not cause. */
  let refused = 0
  const call = async (payload: Record<string, unknown> = {}): Promise<{ status: number, body: { output?: { version?: number } } } | undefined> => {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v1/assist`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(envelope(ID, payload)) })
      return { status: res.status, body: await res.json() as { output?: { version?: number } } }
    } catch (err) {
      if ((err as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED') refused++
      return undefined
    }
  }
  const until = async (what: string, check: () => Promise<boolean>, ms = 60_000): Promise<void> => {
    for (const deadline = Date.now() + ms; !(await check());) {
      if (Date.now() > deadline) throw new Error(`${what} not within ${ms} ms:\n${output}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  await until('the first answer', async () => (await call())?.body.output?.version === 1)
  // pino-pretty writes from its own thread: on a loaded machine its line can come after the first answer
  const plain = (): string => output.replace(/\x1b\[[0-9;]*m/g, '') // eslint-disable-line no-control-regex
  await until('the pretty line of the boot', async () => /\[\d\d:\d\d:\d\d\.\d{3}\] INFO: agents loaded/.test(plain()))
  t.match(plain(), /\[\d\d:\d\d:\d\d\.\d{3}\] INFO: agents loaded/, 'pretty log lines, not JSON')
  t.notMatch(output, /^\{"level"/m)

  const changed = Date.now()
  writeFileSync(join(project, 'agents/hello/index.ts'), agent(2))
  // no call between the save and the new code's first answer is refused: the old code answers until
  // the new one listens. (A call that reuses a keep-alive connection as the closing server shuts it
  // may fail otherwise, as with any server that closes; a browser retries it.)
  const answered: Array<number | undefined> = []
  const refusedBefore = refused
  await until('the edited agent', async () => {
    const version = (await call())?.body.output?.version
    answered.push(version)
    return version === 2
  })
  t.comment(`the edited agent answered ${Date.now() - changed} ms after the save (load average ${(await import('node:os')).loadavg()[0]?.toFixed(1) ?? '?'}; bench/dev-restart.js measures it)`)
  t.equal(refused - refusedBefore, 0, `no call was refused during the restart (${answered.length} calls, ${answered.filter((v) => v === 1).length} answered by the old code, ${answered.filter((v) => v === undefined).length} reset)`)
  t.ok(answered.filter((v) => v === undefined).length <= 2, 'a reset connection is rare: at most the keep-alive ones the old server shut')
  t.match(output, /\[dev\] change in .*agents\/hello\/index\.ts: starting the new server/, 'the watcher says what it saw')

  // issue 31: the first start logged the agents, its warnings and the URLs; a restart logs one line
  // in their place (LOG_BOOT=changes, which the dev script sets)
  t.match(plain(), /WARN: AUTH_MODE is off[^]*INFO: agents loaded[^]*INFO: ready: /, 'the first start logs its warnings, the agents and the URLs')
  const afterRestart = (): string => plain().slice(plain().lastIndexOf('[dev] change in'))
  await until('the restart\'s one line', async () => /INFO: restarted: 1 agent, \d+ task agents?, listening at http:\/\/127\.0\.0\.1:\d+; \d+ warnings? and \d+ other lines? of the start-up log as before, not repeated/.test(afterRestart()), 10_000)
  t.notMatch(afterRestart(), /agents loaded|AUTH_MODE is off|ready: /, 'a restart repeats neither the agents, nor the warnings, nor the URLs')

  const failed = await call({ fail: true })
  t.equal(failed?.status, 502)
  await until('the agent error in the log', async () => /broken on purpose/.test(output), 10_000)
  t.match(output, /agents\/hello\/index\.ts:\d+:\d+/, 'the stack names the agent\'s .ts file and line')

  // a change that does not boot: the running server goes on answering, and the watcher says so
  writeFileSync(join(project, 'agents/hello/index.ts'), 'export default {}\n')
  await until('the failed boot\'s line', async () => /\[dev\] the server did not start \(exit code 1\): the running one goes on answering/.test(output), 60_000)
  t.equal((await call())?.body.output?.version, 2, 'the last good code still answers')
  writeFileSync(join(project, 'agents/hello/index.ts'), agent(3))
  await until('the mended agent', async () => (await call())?.body.output?.version === 3)
})
