#!/usr/bin/env node
// The command line's process entry point (like server.ts for the server): the only place it reads
// process.env and sets the exit code.
import { main } from './commands.js'

try {
  process.exitCode = main(process.argv.slice(2), process.env)
} catch (err) {
  console.error(`agent-host: ${(err as Error).message}`)
  process.exitCode = 1
}
