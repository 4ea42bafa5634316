/** What the commands share: where they write, the stores, and tables for people or pipes. */
import type { Config } from '../config.js'
import { openStores } from '../plugins/storage.js'
import type { Stores } from '../storage/stores.js'
import type { Progress } from '../terminal-progress.js'

/** Where a command writes, and what stops a long-running one. */
export interface CommandIo {
  out: (line: string) => void
  err: (line: string) => void
  /** Stops `worker` (the CLI wires SIGTERM and SIGINT to it). */
  signal?: AbortSignal
  /** The project folder `new` writes into (default: the current directory). */
  cwd?: string
  /** Where long work reports how far it got (the CLI gives one only when stderr is a terminal). */
  progress?: Progress
  /** `out` goes to a terminal: tables are aligned for reading, not tab-separated. */
  outIsTerminal?: boolean
}

/**
 * The stores the server uses (DATABASE_URL's, else DATA_DIR's), without a server's background work;
 * pending migrations (if any) shown on `io.progress`. `name` is the process's in the database
 * (`agent-host <name>`, PostgreSQL's `application_name`).
 */
export async function openCommandStores (config: Config, name: string, io: CommandIo): Promise<Stores> {
  const progress = io.progress
  const line = (level: string) => (obj: object, msg: string) => { io.err(JSON.stringify({ level, msg, ...obj })) }
  try {
    return await openStores(config, {
      instanceId: name,
      log: { info: line('info'), warn: line('warn'), error: line('error') },
      serving: false,
      // on a terminal a progress line; otherwise nothing (a server's driver logs each step, a command's output stays its own)
      onMigration: progress === undefined ? () => {} : (step, index, pending) => { progress.update(index, pending, `migrating the database (${step.version}: ${step.description})`) }
    })
  } finally {
    progress?.end()
  }
}

/** Rows under a header: tab-separated, or on a terminal in columns padded to their widest cell. */
export function table (header: string[], rows: string[][], io: CommandIo): void {
  if (io.outIsTerminal !== true) {
    for (const row of [header, ...rows]) io.out(row.join('\t'))
    return
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  for (const row of [header, ...rows]) io.out(row.map((cell, i) => i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)).join('  '))
}
