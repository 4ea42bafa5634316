// `npm run dev`: the server from the TypeScript sources, restarted on every saved change under src/
// or the agents' folder (AGENTS_DIR, default agents/), without refusing a connection meanwhile.
//
// Why not `tsx watch`: it kills the server, then starts the new one, so for the two seconds of a
// boot every request is refused. Here the server runs as a cluster worker of this process, which
// holds the listening socket: on a change a new worker boots beside the running one, and only once
// it listens is the old one told to close (SIGTERM: it finishes what it serves). Until then the old
// code answers; a new one that fails to boot leaves the old one serving, and says so.
import cluster from 'node:cluster'
import { watch } from 'node:fs'
import { relative, resolve, sep } from 'node:path'

const ROOT = resolve(import.meta.dirname, '..')
// what a change must settle for: an editor's save is several events
const SETTLE_MS = 100

/** One line of this script's own, beside the server's log. */
const say = (message) => { process.stderr.write(`[dev] ${message}\n`) }

cluster.setupPrimary({
  exec: resolve(ROOT, 'src/server.ts'),
  execArgv: [...process.execArgv, '--import', 'tsx', '--conditions=development', '--import=./scripts/dev-bundles.mjs']
})

/** The worker serving now, and the one booting to replace it. */
let serving
let booting
/** A change came while a worker was booting: boot again once it is up. */
let again = false
let stopping = false

function boot () {
  const worker = cluster.fork({ AGENT_HOST_DEV_WORKER: '1' })
  booting = worker
  worker.once('listening', () => {
    const previous = serving
    serving = worker
    booting = undefined
    if (previous !== undefined) previous.send('agent-host:close')
    if (again) { again = false; boot() }
  })
  worker.once('exit', (code, signal) => {
    if (worker === booting) {
      booting = undefined
      if (stopping) return
      say(`the server did not start (${signal ?? `exit code ${code}`}): ${serving !== undefined ? 'the running one goes on answering with the code before this change; ' : ''}fix what it said and save again`)
      if (again) { again = false; boot() }
    } else if (worker === serving) {
      serving = undefined
      if (!stopping) say(`the server stopped (${signal ?? `exit code ${code}`}); save a file to start it again`)
    }
  })
}

let settling
/** A saved change: boot a new server (after the current boot, if one is under way). */
function changed (file) {
  if (stopping) return
  clearTimeout(settling)
  settling = setTimeout(() => {
    say(`change in ${file}: starting the new server (the running one answers until it is ready)`)
    if (booting !== undefined) again = true
    else boot()
  }, SETTLE_MS)
}

const agentsDir = resolve(process.env.AGENTS_DIR ?? resolve(ROOT, 'agents'))
const watchers = [resolve(ROOT, 'src'), agentsDir].map((dir) => watch(dir, { recursive: true }, (_event, name) => {
  if (name === null || /(^|\/)(node_modules|\.git)(\/|$)|~$|\.swp$/.test(name)) return
  const file = resolve(dir, name)
  changed(file.startsWith(ROOT + sep) ? relative(ROOT, file) : file)
}))

// the workers ignore signals (a terminal's reaches the whole group): each is told to close, as the
// server closes on a signal, and this process ends with the last of them
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    if (stopping) return
    stopping = true
    for (const watcher of watchers) watcher.close()
    clearTimeout(settling)
    const workers = Object.values(cluster.workers ?? {})
    if (workers.length === 0) process.exit(0)
    for (const worker of workers) worker?.send('agent-host:close')
  })
}
cluster.on('exit', () => {
  if (stopping && Object.keys(cluster.workers ?? {}).length === 0) process.exit(0)
})

boot()
