/**
 * The `agent-host` command line: its usage, and the dispatch to each command, a module of
 * `src/commands/` imported only when it runs (src/cli.ts is the process entry point).
 */
import { parseArgs } from 'node:util'
import pkg from '../package.json' with { type: 'json' }
import type { CommandIo } from './commands/shared.js'
import { USAGE } from './commands/usage.js'

export type { CommandIo } from './commands/shared.js'
export { USAGE } from './commands/usage.js'

/**
 * The `agent-host` command line (src/cli.ts is its process entry point).
 * @returns the exit code
 */
export async function main (argv: string[], env: Record<string, string | undefined>, io: CommandIo = { out: console.log, err: console.error }): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'data-dir': { type: 'string' },
        type: { type: 'string' },
        concurrency: { type: 'string', default: '1' },
        name: { type: 'string' },
        scopes: { type: 'string' },
        agents: { type: 'string' },
        tenant: { type: 'string' },
        expires: { type: 'string' },
        checkpoint: { type: 'string', multiple: true },
        'checkpoint-file': { type: 'string', multiple: true },
        to: { type: 'string' },
        json: { type: 'boolean' },
        stream: { type: 'boolean' },
        task: { type: 'boolean' },
        contract: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' }
      }
    })
  } catch (e) {
    io.err(`${(e as Error).message}\n\n${USAGE}`)
    return 2
  }
  const [command, sub] = parsed.positionals
  if (parsed.values.version === true) { io.out(pkg.version); return 0 }
  if (parsed.values.help === true || command === undefined) {
    io.out(USAGE)
    return command === undefined && parsed.values.help !== true ? 2 : 0
  }
  const scoped = { ...env, ...(parsed.values['data-dir'] !== undefined ? { DATA_DIR: parsed.values['data-dir'] } : {}) }
  // each command's module is imported when it runs: --version and --help load none, keys list no worker
  if (command === 'audit' && sub === 'verify') return await (await import('./commands/audit-verify.js')).auditVerify(parsed.values, scoped, io)
  if (command === 'backup') return await (await import('./commands/backup.js')).backup(parsed.values, scoped, io)
  if (command === 'new') return await (await import('./scaffold.js')).newAgent(parsed.positionals.slice(1), parsed.values, { root: io.cwd ?? process.cwd(), env }, io)
  if (command === 'keys') return await (await import('./commands/keys.js')).keys(sub, parsed.positionals[2], parsed.values, scoped, io)
  if (command === 'secrets') return await (await import('./commands/secrets.js')).secrets(sub, scoped, io)
  if (command === 'worker') {
    const concurrency = Number(parsed.values.concurrency)
    if (!Number.isInteger(concurrency) || concurrency < 1) { io.err('--concurrency must be a positive integer'); return 2 }
    return await (await import('./commands/worker.js')).worker(parsed.values.type, concurrency, scoped, io)
  }
  io.err(`unknown command: ${parsed.positionals.join(' ')}\n\n${USAGE}`)
  return 2
}
