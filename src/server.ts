import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { BootLog } from './boot-log.js'
import { loadConfig, type Config } from './config.js'
import { startTelemetry, type TelemetryLog } from './telemetry.js'

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

closeWithGrace({ delay: config.CLOSE_GRACE_MS, logger: app.log }, async ({ signal, err }) => {
  if (err !== undefined) app.log.error({ err }, 'closing after an uncaught error')
  else app.log.info({ signal }, 'shutting down')
  try {
    await app.close()
  } finally {
    // the spans still buffered (the last runs, the closing commits) are exported before the process exits
    await telemetry?.shutdown()
  }
})

try {
  await app.listen({ host: config.HOST, port: config.PORT })
} catch (err) {
  app.log.fatal({ err }, 'cannot listen')
  process.exit(1)
}
const restarted = bootLog?.finish(`${count(app.agents.list().length, 'agent')}, ${count(app.taskAgents.length, 'task agent')}, listening at ${app.listeningOrigin}`)
if (restarted !== undefined) app.log.info(restarted)
