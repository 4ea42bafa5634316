#!/usr/bin/env node
// The command line's process entry point (like server.ts for the server): the only place it reads
// process.env, handles signals and sets the exit code.
import { main } from './commands.js'
import { terminalProgress } from './terminal-progress.js'

const stop = new AbortController()
process.once('SIGTERM', () => { stop.abort() })
process.once('SIGINT', () => { stop.abort() })

// progress and aligned tables only for a person at a terminal: piped, the output is the results alone
const progress = process.stderr.isTTY ? terminalProgress((text) => { process.stderr.write(text) }, { columns: process.stderr.columns }) : undefined
try {
  process.exitCode = await main(process.argv.slice(2), process.env, { out: console.log, err: console.error, signal: stop.signal, progress, outIsTerminal: process.stdout.isTTY })
} catch (err) {
  console.error(`agent-host: ${(err as Error).message}`)
  process.exitCode = 1
}
