import t from 'tap'
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer, request as httpRequest } from 'node:http'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { parse } from 'yaml'
import { loadAgents } from '../../src/agents/loader.js'
import { BUNDLED_AGENTS_DIR, ConfigSchema, loadConfig } from '../../src/config.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { AGENTS, envelope, tempDataDir, type Teardown } from '../helper.js'
import { connect } from '../mcp/client.js'
import { ownPgServer } from '../pg.js'
import { startServer } from '../server-child.js'
import { until } from '../socket.js'
import { parseDockerfile } from './dockerfile-runner.js'

// compose.yaml's cluster run outside Docker: its PostgreSQL as a throwaway server made as the
// postgres service would make it, its two API instances and its worker as the image would start
// them (the Dockerfile's CMD, the worker's command) with the environment the file gives them, and its
// load balancer's upstreams held against the services. A broken step fails CI.

t.setTimeout(300_000)
const ROOT = fileURLToPath(new URL('../../', import.meta.url))

interface Service { image?: string, build?: string, command?: string[], environment?: Record<string, string>, volumes?: string[], depends_on?: unknown, ports?: string[] }

const compose = parse(readFileSync(join(ROOT, 'compose.yaml'), 'utf8'), { merge: true }) as { services: Record<string, Service> }
const services = compose.services
const agentHosts = Object.entries(services).filter(([, s]) => s.build === '.')

/** `${NAME:?message}` and `${NAME:-default}` as compose resolves them, from `vars`. */
function interpolate (value: string, vars: Record<string, string>): string {
  return value.replace(/\$\{([A-Z_]+)(?::([?-])([^}]*))?\}/g, (_whole, name: string, kind: string | undefined, rest: string | undefined) => {
    const found = vars[name]
    if (found !== undefined && found !== '') return found
    if (kind === '?') throw new Error(`compose needs ${name}: ${String(rest)}`)
    return rest ?? ''
  })
}

/**
 * A load balancer without affinity, as compose's nginx is: each request to the next instance in
 * turn, streamed both ways. How many each instance served.
 */
async function roundRobin (t: Teardown, upstreams: readonly string[]): Promise<{ url: string, served: number[] }> {
  const served = upstreams.map(() => 0)
  let next = 0
  const server = createServer((req, res) => {
    const at = next++ % upstreams.length
    served[at] = (served[at] ?? 0) + 1
    const target = new URL(upstreams[at] as string)
    const upstream = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    upstream.on('error', () => { res.destroy() })
    res.on('close', () => { upstream.destroy() })
    req.pipe(upstream)
  })
  await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
  t.teardown(async () => { server.closeAllConnections(); await new Promise((resolve) => { server.close(resolve) }) })
  const address = server.address() as { port: number }
  return { url: `http://127.0.0.1:${address.port}`, served }
}

t.test('the file: a database, two API instances, a worker and a load balancer; every setting is one the server knows', async (t) => {
  t.same(Object.keys(services).sort(), ['api-1', 'api-2', 'lb', 'postgres', 'worker'])
  t.same(agentHosts.map(([name]) => name).sort(), ['api-1', 'api-2', 'worker'], 'built from this repository')
  for (const [name, service] of agentHosts) {
    for (const key of Object.keys(service.environment ?? {})) t.ok(key in ConfigSchema.properties, `${name}: ${key} is a setting`)
    const env = Object.fromEntries(Object.entries(service.environment ?? {}).map(([k, v]) => [k, interpolate(String(v), { POSTGRES_PASSWORD: 'p', AUDIT_KEY: 'k'.repeat(32) })]))
    const config = loadConfig(env)
    t.match(config.DATABASE_URL, /^postgres:\/\/agent_host:p@postgres:5432\/agent_host$/, `${name}: the postgres service's database`)
    t.equal(config.TASK_STORE, 'postgres', `${name}: the task graph is shared`)
  }
  t.throws(() => interpolate(String(services['api-1']?.environment?.AUDIT_KEY), {}), /compose needs AUDIT_KEY/, 'an unset secret stops compose, not the server')
  const nginx = readFileSync(join(ROOT, 'deploy/nginx.conf'), 'utf8')
  const upstreams = [...nginx.matchAll(/^\s*server (\S+):(\d+)/gm)].map((m) => `${String(m[1])}:${String(m[2])}`)
  const port = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8')).find((i) => i.op === 'ENV' && /PORT=(\d+)/.test(i.args))?.args.match(/PORT=(\d+)/)?.[1]
  t.same(upstreams, [`api-1:${String(port)}`, `api-2:${String(port)}`], 'the load balancer sends to both API instances on the image\'s port')
  t.match(nginx, /proxy_buffering off;/, 'streams pass through unbuffered')
  t.same(services.lb?.volumes, ['./deploy/nginx.conf:/etc/nginx/nginx.conf:ro'])
})

t.test('every task type of the bundled agents has workers in the cluster: a task of any type is done, none stays PENDING', async (t) => {
  const { taskAgents } = await loadAgents(BUNDLED_AGENTS_DIR)
  const types = taskAgents.map((a) => a.agent.agentType).sort()
  t.ok(types.length >= 2, `the bundled task types: ${types.join(', ')}`)
  const worked = new Set<string>()
  for (const [, service] of agentHosts) {
    const command = service.command ?? []
    const at = command.indexOf('--type')
    if (at >= 0) worked.add(String(command[at + 1]))
    else if (Number(service.environment?.WORKERS_PER_TYPE ?? loadConfig({}).WORKERS_PER_TYPE) > 0) types.forEach((type) => worked.add(type))
  }
  t.same(types.filter((type) => !worked.has(type)), [], 'no type without a worker')
})

t.test('the cluster runs: a task made on one instance is done by the worker and seen on the other; an answer is the same from either', async (t) => {
  const cluster = await ownPgServer(t)
  if (cluster === undefined) return
  // what the postgres service's environment makes on first start
  const postgres = services.postgres?.environment as Record<string, string>
  const admin = new pg.Client({ connectionString: cluster.url })
  await admin.connect()
  await admin.query(`CREATE ROLE ${postgres.POSTGRES_USER as string} LOGIN PASSWORD 'secret'`)
  await admin.query(`CREATE DATABASE ${postgres.POSTGRES_DB as string} OWNER ${postgres.POSTGRES_USER as string}`)
  await admin.end()
  const vars = { POSTGRES_PASSWORD: 'secret', AUDIT_KEY: 'a'.repeat(40), BOOTSTRAP_ADMIN_KEY: 'b'.repeat(40) }
  const envOf = (name: string): Record<string, string> => {
    const env = Object.fromEntries(Object.entries(services[name]?.environment ?? {}).map(([k, v]) => [k, interpolate(String(v), vars)]))
    // the service's hostname on compose's network is this machine's throwaway server
    env.DATABASE_URL = (env.DATABASE_URL as string).replace('@postgres:5432/', `@127.0.0.1:${cluster.port}/`)
    return { ...env, DATA_DIR: tempDataDir(t) }
  }
  const image = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))
  t.match(image.filter((i) => i.op === 'CMD').at(-1)?.args, /dist\/src\/server\.js/, 'the API instances run the image\'s CMD: the server (here from its source)')
  const api1 = await startServer(t, envOf('api-1'))
  const api2 = await startServer(t, envOf('api-2'))
  const [command, ...args] = services.worker?.command ?? []
  t.equal(command, 'node')
  const cli = args.findIndex((a) => a === 'dist/src/cli.js')
  t.ok(cli >= 0, 'the worker runs the command line')
  const worker = spawn(process.execPath, [...process.execArgv, join(ROOT, 'src/cli.ts'), ...args.slice(cli + 1)], { cwd: ROOT, env: { ...process.env, ...envOf('worker') }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { if (worker.exitCode === null) worker.kill('SIGKILL') })
  let workerOut = ''
  worker.stdout.on('data', (c: Buffer) => { workerOut += c.toString() })
  await until('the worker ready', () => workerOut.includes('worker ready'), 60_000, 50)
  t.match(workerOut, /store postgres/)

  const auth = { authorization: `Bearer ${vars.BOOTSTRAP_ADMIN_KEY}`, 'content-type': 'application/json' }
  const json = async (response: Response | Promise<Response>): Promise<Record<string, any>> => await (await response).json() as Record<string, any>
  for (const api of [api1, api2]) t.equal((await json(fetch(`${api.url}/health`))).status, 'ok')
  const made = await fetch(`${api1.url}/v1/tasks`, { method: 'POST', headers: auth, body: JSON.stringify({ type: 'wordcount', inputs: { text: 'one two two three three three' } }) })
  t.equal(made.status, 201)
  const [task] = (await json(made)).tasks as Array<{ id: string }>
  await until('the worker to finish the task, seen from the other instance', async () => {
    const seen = await json(fetch(`${api2.url}/v1/tasks/${String(task?.id)}`, { headers: auth }))
    return seen.status === 'COMPLETED'
  }, 60_000, 100)
  // a type the worker service does not take: the API instances' own task loops do it
  const summary = await fetch(`${api2.url}/v1/tasks`, { method: 'POST', headers: auth, body: JSON.stringify({ type: 'summarize', dependency_ids: [task?.id] }) })
  t.equal(summary.status, 201)
  const [sum] = (await json(summary)).tasks as Array<{ id: string }>
  await until('a summarize task to be done too', async () => (await json(fetch(`${api1.url}/v1/tasks/${String(sum?.id)}`, { headers: auth }))).status === 'COMPLETED', 60_000, 100)
  const body = envelope(AGENTS.echo, { query: 'through the cluster' })
  const first = await fetch(`${api2.url}/v1/assist`, { method: 'POST', headers: { ...auth, accept: 'application/json' }, body: JSON.stringify(body) })
  const again = await fetch(`${api1.url}/v1/assist`, { method: 'POST', headers: { ...auth, accept: 'application/json' }, body: JSON.stringify(body) })
  t.equal(first.status, 200)
  t.same((await json(again)).output, (await json(first)).output, 'the other instance answers with the stored answer')

  // MCP through a load balancer without affinity: every request of a session to the next instance
  const balancer = await roundRobin(t, [api1.url, api2.url])
  const mcp = await connect(t, balancer.url, { key: vars.BOOTSTRAP_ADMIN_KEY })
  t.ok((await mcp.client.listTools()).tools.some((tool) => tool.name === 'echo'))
  const called = await mcp.client.callTool({ name: 'echo', arguments: { query: 'round robin' } })
  t.match(called.structuredContent, { echo: 'round robin' }, 'a tools/call on whichever instance')
  await mcp.transport.terminateSession()
  t.ok(balancer.served.every((n) => n >= 2), `both instances served the session (${balancer.served.join(', ')})`)
  const [readme] = docBlocks('README.md', '## From an MCP client')
  const out = await runShell((readme as string).replaceAll('http://127.0.0.1:3000', balancer.url), { env: { AGENT_HOST_KEY: vars.BOOTSTRAP_ADMIN_KEY } })
  t.match(out, /"structuredContent":\{"echo":"hello over MCP"/, 'the README\'s MCP section, as written, through the balancer')
  t.match(out.trim().split('\n').at(-1), /^200$/, 'and its DELETE ended the session')

  const verified = await json(fetch(`${api1.url}/v1/audit/verify`, { headers: auth }))
  t.match(verified, { ok: true }, 'one audit chain, signed by every process with the same key')
  worker.kill('SIGTERM')
  await until('the worker to stop', () => worker.exitCode !== null, 30_000, 50)
  t.equal(worker.exitCode, 0)
})
