import t from 'tap'
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildImage, parseDockerfile, rewritePaths, type Image } from './dockerfile-runner.js'
import { harnessFreeEnv } from '../child-env.js'
import { needsPrograms } from '../host-programs.js'
import { freePort } from '../socket.js'

// Issue 17: the Dockerfile's steps run outside Docker (same npm ci, same build and prune, same
// files copied, same ENV, ENTRYPOINT and CMD, same HEALTHCHECK command), so a broken step fails CI.
// Then the "container" is started as the image would start it: it warns that no key exists, takes a
// first-run key, serves an agent mounted outside /app that imports 'agent-host', passes its health
// check, and stops cleanly on SIGTERM through tini.

t.setTimeout(900_000)
const ROOT = fileURLToPath(new URL('../../', import.meta.url))
// tap's hooks and markers are this test's, not the image's
const HOST_ENV = harnessFreeEnv((name) => name === 'NODE_ENV')

/**
 * better-sqlite3's prebuilt addon for this runtime, where its installer (prebuild-install) looks
 * first: in Docker, \`npm ci\` downloads the prebuild from GitHub; here, without a network, it would
 * compile the addon from source (two minutes of CPU) after trying to reach GitHub. The addon is the
 * one this checkout's own \`npm ci\` built, packed as its download would be. Returns the environment
 * that points the installer at it.
 */
function localPrebuild (dir: string): Record<string, string> {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'node_modules/better-sqlite3/package.json'), 'utf8')) as { version: string }
  const name = `better-sqlite3-v${pkg.version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`
  mkdirSync(dir, { recursive: true })
  execFileSync('tar', ['-czf', join(dir, name), '-C', join(ROOT, 'node_modules/better-sqlite3'), 'build/Release/better_sqlite3.node'])
  return { npm_config_better_sqlite3_local_prebuilds: dir }
}

interface Container { child: ChildProcess, output: () => string, url: string, env: Record<string, string>, exited: Promise<number | null> }

/** Start the image: ENTRYPOINT + CMD in its WORKDIR with its ENV (PORT moved to a free one, as `-p` would). */
async function start (image: Image, extra: Record<string, string> = {}): Promise<Container> {
  const port = await freePort()
  // in the container tini is PID 1; here it registers as the subreaper of what it starts instead
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: tmpdir(), TINI_SUBREAPER: '1', ...image.env, PORT: String(port), ...extra }
  const [command, ...args] = [...image.entrypoint, ...image.cmd] as [string, ...string[]]
  const child = spawn(command, args, { cwd: image.workdir, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => { resolve(code) }))
  const url = `http://127.0.0.1:${port}`
  for (const deadline = Date.now() + 60_000; ;) {
    if (child.exitCode !== null) throw new Error(`the container exited ${child.exitCode}:\n${output}`)
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) break
    if (Date.now() > deadline) throw new Error(`no /health within 60 s:\n${output}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return { child, output: () => output, url, env, exited }
}

async function stop (container: Container): Promise<number | null> {
  container.child.kill('SIGTERM')
  return await container.exited
}

t.test('the runner: instructions, continuation lines, and which paths are the image\'s', async (t) => {
  t.same(parseDockerfile('# c\nFROM a AS b\nRUN x \\\n # inside\n && y\n\nCMD ["n"]\n').map((i) => [i.op, i.args, i.line]), [['FROM', 'a AS b', 2], ['RUN', 'x && y', 3], ['CMD', '["n"]', 7]])
  t.equal(rewritePaths('mkdir -p /app/data /node_modules && ln -s /app /node_modules/x; ls /usr/bin /tmp', '/r'), 'mkdir -p /r/app/data /r/node_modules && ln -s /r/app /r/node_modules/x; ls /usr/bin /tmp')
  t.equal(rewritePaths('DATA_DIR=/app/data', '/r'), 'DATA_DIR=/r/app/data')
})

/**
 * The image's steps are proven on the image's runtime (the Node.js major of every FROM): .ci/run's
 * Node.js 24 pass runs this file; on another runtime (`npm test` on Node.js 20) the walkthrough is
 * skipped, as a proof on the wrong runtime proves less and costs two minutes of CPU.
 */
function imageRuntime (dockerfile: string): string | undefined {
  const majors = new Set(parseDockerfile(dockerfile).filter((i) => i.op === 'FROM').map((i) => /^node:(\d+)/.exec(i.args)?.[1]))
  return majors.size === 1 ? [...majors][0] : undefined
}
const IMAGE_NODE = imageRuntime(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))
const RUNTIME = process.versions.node.split('.')[0]

t.test('the image runs one Node.js major in every stage', async (t) => {
  t.ok(IMAGE_NODE, 'every FROM is node:<major>..., the same major')
  t.equal(imageRuntime('FROM node:24.1-slim AS b\nFROM node:24-slim\n'), '24')
  t.equal(imageRuntime('FROM node:24 AS b\nFROM node:22\n'), undefined, 'two majors')
  t.equal(imageRuntime('FROM debian:12\n'), undefined)
})

t.test('the runtime stage runs the exact Node.js the build stage compiled the addon against, not a floating tag', async (t) => {
  const tags = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8')).filter((i) => i.op === 'FROM').map((i) => i.args.split(' ')[0])
  t.ok(tags.length >= 2, 'a build stage and a runtime stage')
  for (const tag of tags) t.match(tag, /^node:\d+\.\d+\.\d+-/, `${String(tag)} names a release`)
  t.equal(new Set(tags).size, 1, 'the same one in every stage')
})

t.test('the Dockerfile, built and run outside Docker', { skip: IMAGE_NODE === RUNTIME ? needsPrograms(['tini']) : `the image runs Node.js ${IMAGE_NODE ?? '?'} and this is ${process.version}: its steps run in .ci/run's Node.js ${IMAGE_NODE ?? '?'} pass` }, async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'agent-host-image-'))
  t.teardown(() => { rmSync(work, { recursive: true, force: true }) })
  const image = await buildImage(join(ROOT, 'Dockerfile'), ROOT, work, { ...HOST_ENV, ...localPrebuild(join(work, 'prebuilds')) })
  t.notOk(existsSync(join(image.root, 'app/node_modules/better-sqlite3/build/Release/obj.target')), 'npm ci installed the prebuilt addon, not a compiled one')
  t.match(image.entrypoint, ['/usr/bin/tini', '--'], 'tini is PID 1')
  t.match(image.cmd, ['node', '--enable-source-maps', 'dist/src/server.js'])
  t.match(image.env, { NODE_ENV: 'production', HOST: '0.0.0.0', AUTH_MODE: 'apikey', DATA_DIR: join(image.root, 'app/data') })
  t.ok(image.healthcheck, 'a HEALTHCHECK')
  t.comment(`checked, not run: ${image.skipped.join('; ')}`)

  // first run: no key exists, and the log says so loudly
  let container = await start(image)
  t.notMatch(container.output(), /WARN +tini/, 'tini is content')
  t.match(container.output(), /AUTH_MODE is apikey but no API key exists: every request but \/health and \/docs will be refused with 401/)
  t.equal((await fetch(`${container.url}/v1/agents`)).status, 401)
  const health = spawn(image.healthcheck?.[0] as string, image.healthcheck?.slice(1) as string[], { cwd: image.workdir, env: container.env })
  t.equal(await new Promise((resolve) => health.once('exit', resolve)), 0, 'the HEALTHCHECK command passes')
  t.equal(await stop(container), 0, 'SIGTERM through tini: a clean exit')
  t.match(container.output(), /shutting down/)

  // an agent mounted outside /app (docker run -v ./agents:/agents -e AGENTS_DIR=/agents) imports 'agent-host'
  const agents = join(image.root, 'agents')
  mkdirSync(join(agents, 'greeter'), { recursive: true })
  writeFileSync(join(agents, 'package.json'), '{"type":"module"}')
  writeFileSync(join(agents, 'greeter/index.js'), GREETER)
  const key = 'first-run-key-0123456789abcdef0123456789'
  container = await start(image, { BOOTSTRAP_ADMIN_KEY: key, AGENTS_DIR: agents })
  t.teardown(() => { container.child.kill('SIGKILL') })
  t.match(container.output(), /made the admin key \\"bootstrap-admin\\" from BOOTSTRAP_ADMIN_KEY/)
  t.notMatch(container.output(), /no API key exists/)
  const res = await fetch(`${container.url}/v1/assist`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      request_id: '6f0b3b9e-8d0c-4b8a-9f7e-2b7c1e0d4a55',
      context: { session_id: '0c6d4d0e-2b7a-4f61-8a3e-51d5b7c9e2f0', agent_id: GREETER_ID, user: { user_id: 'u', tier: 'free', locale: 'en' }, trace: { trace_id: '33333333-3333-4333-8333-333333333333', span_id: '44444444-4444-4444-8444-444444444444' }, permissions: [], created_at: '2026-11-25T10:00:00.000Z' },
      payload: { session_id: '0c6d4d0e-2b7a-4f61-8a3e-51d5b7c9e2f0', payload: { query: 'Ada' } }
    })
  })
  t.equal(res.status, 200, 'the first-run key works')
  t.match(await res.json(), { output: { greeting: 'Hello, Ada!' } }, 'and the mounted agent answers')
  t.equal(res.headers.get('traceparent')?.split('-')[1], '33333333333343338333333333333333', 'the envelope\'s trace id names the response')
  t.equal(await stop(container), 0)
})

const GREETER_ID = '7c0f4f8e-1b1e-4d7a-9a57-2f6b3f3c9e12'
const GREETER = `import { defineAgent } from 'agent-host'

export default defineAgent({
  manifest: {
    metadata: { id: '${GREETER_ID}', name: 'greeter', version: '1.0.0', author: 'an operator', created_at: '2026-11-25T00:00:00.000Z' },
    capabilities: [{
      name: 'greet',
      description: 'Greets the query',
      delivery_mode: 'request_response',
      inputs: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
      outputs: { type: 'object', properties: { greeting: { type: 'string' } }, required: ['greeting'] }
    }]
  },
  async assist (request, _session, response) {
    await response.result({ greeting: \`Hello, \${String(request.payload.query)}!\` })
  }
})
`
