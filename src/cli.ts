#!/usr/bin/env node
// The command line's process entry point (like server.ts for the server): the only place it reads
// process.env, handles signals and sets the exit code.
import { main } from './commands.js'

const stop = new AbortController()
process.once('SIGTERM', () => { stop.abort() })
process.once('SIGINT', () => { stop.abort() })

try {
  process.exitCode = await main(process.argv.slice(2), process.env, { out: console.log, err: console.error, signal: stop.signal })
} catch (err) {
  console.error(`agent-host: ${(err as Error).message}`)
  process.exitCode = 1
}
