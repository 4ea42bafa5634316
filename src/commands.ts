import { parseArgs } from 'node:util'
import { loadConfig } from './config.js'
import { openDatabase } from './storage/database.js'
import { AuditLog } from './storage/audit.js'

const USAGE = `usage: agent-host <command>

commands:
  audit verify [--data-dir DIR]   check the audit log's hash chain (exit 0 when intact, 1 when not)

DATA_DIR (or --data-dir) selects the data folder, as for the server.`

/**
 * The `agent-host` command line (src/cli.ts is its process entry point).
 * @returns the exit code
 */
export function main (argv: string[], env: Record<string, string | undefined>, out = console.log, err = console.error): number {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: { 'data-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } } })
  } catch (e) {
    err(`${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const [command, sub] = parsed.positionals
  if (parsed.values.help === true || command === undefined) {
    out(USAGE)
    return command === undefined && parsed.values.help !== true ? 2 : 0
  }
  if (command === 'audit' && sub === 'verify') {
    const config = loadConfig({ ...env, ...(parsed.values['data-dir'] !== undefined ? { DATA_DIR: parsed.values['data-dir'] } : {}) })
    const db = openDatabase(config.DATA_DIR)
    try {
      const result = new AuditLog(db).verify()
      out(JSON.stringify(result))
      return result.ok ? 0 : 1
    } finally {
      db.close()
    }
  }
  err(`unknown command: ${parsed.positionals.join(' ')}\n\n${USAGE}`)
  return 2
}
