import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { BootLog } from './boot-log.js'
import { loadConfig, type Config } from './config.js'
import { startTelemetry, type TelemetryLog } from './telemetry.js'

// a worker of `npm run dev` (scripts/dev.mjs) is closed by its watcher, which starts its successor
// first: it ignores signals (a terminal's reaches every process of the group) and closes when told
const devWorker = process.env.AGENT_HOST_DEV_WORKER === '1' && process.send !== undefined
const watcher: { closeAsked: boolean, close?: () => void } = { closeAsked: false }
if (devWorker) {
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => {})
  process.on('message', (message) => {
    if (message !== 'agent-host:close') return
    if (watcher.close !== undefined) watcher.close()
    else watcher.closeAsked = true
  })
}

let config: Config
try {
  config = loadConfig(process.env, true)
} catch (err) {
  console.error(`agent-host: ${(err as Error).message}`)
  process.exit(1)
}

// telemetry starts before the app, which takes its provider: until the app's log exists, what it says goes to stderr
const stderr = (_obj: object, msg: string): void => { console.error(`agent-host: ${msg}`) }
let log: TelemetryLog = { warn: stderr, error: stderr }
const telemetry = await startTelemetry(process.env, { warn: (obj, msg) => { log.warn(obj, msg) }, error: (obj, msg) => { log.error(obj, msg) } })

const count = (n: number, what: string): string => `${n} ${what}${n === 1 ? '' : 's'}`
// npm run dev's watcher restarts this process on every save: a restart logs only what changed
const bootLog = config.LOG_BOOT === 'changes' ? new BootLog(config.DATA_DIR, process.ppid) : undefined

let app
try {
  app = await buildApp(config, { ...(telemetry === undefined ? {} : { tracerProvider: telemetry.provider }), ...(bootLog === undefined ? {} : { bootLog }) })
} catch (err) {
  console.error(`agent-host: cannot start: ${(err as Error).message}`)
  process.exit(1)
}
log = app.log
if (telemetry !== undefined) app.log.info({ exporters: telemetry.exporters }, 'exporting OpenTelemetry traces')

const grace = closeWithGrace({ delay: config.CLOSE_GRACE_MS, logger: app.log, ...(devWorker ? { skip: ['SIGINT', 'SIGTERM'] } : {}) }, async ({ signal, err, manual }) => {
  if (err !== undefined) app.log.error({ err }, 'closing after an uncaught error')
  else if (manual === true) app.log.info('closing: npm run dev\'s watcher asked (its successor serves, or it is stopping)')
  else app.log.info({ signal }, 'shutting down')
  try {
    await app.close()
  } finally {
    // the spans still buffered (the last runs, the closing commits) are exported before the process exits
    await telemetry?.shutdown()
  }
})

watcher.close = () => { grace.close() }
if (watcher.closeAsked) {
  // npm run dev's watcher is stopping, or has a newer successor: this one never serves
  grace.close()
} else {
  try {
    await app.listen({ host: config.HOST, port: config.PORT })
  } catch (err) {
    app.log.fatal({ err }, 'cannot listen')
    process.exit(1)
  }
  const restarted = bootLog?.finish(`${count(app.agents.list().length, 'agent')}, ${count(app.taskAgents.length, 'task agent')}, listening at ${app.listeningOrigin}`)
  if (restarted !== undefined) app.log.info(restarted)
}
