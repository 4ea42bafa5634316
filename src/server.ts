import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { loadConfig, type Config } from './config.js'

let config: Config
try {
  config = loadConfig(process.env, true)
} catch (err) {
  console.error(`agent-host: ${(err as Error).message}`)
  process.exit(1)
}

let app
try {
  app = await buildApp(config)
} catch (err) {
  console.error(`agent-host: cannot start: ${(err as Error).message}`)
  process.exit(1)
}

closeWithGrace({ delay: config.CLOSE_GRACE_MS, logger: app.log }, async ({ signal, err }) => {
  if (err !== undefined) app.log.error({ err }, 'closing after an uncaught error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

try {
  await app.listen({ host: config.HOST, port: config.PORT })
} catch (err) {
  app.log.fatal({ err }, 'cannot listen')
  process.exit(1)
}
