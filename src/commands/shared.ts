/** What the commands share: where they write, DATA_DIR's database, and tables for people or pipes. */
import { openDatabase, type Db } from '../storage/sqlite/database.js'
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

/** DATA_DIR's database, its pending migrations (if any) shown on `io.progress`. */
export function openData (dataDir: string, io: CommandIo): Db {
  const progress = io.progress
  if (progress === undefined) return openDatabase(dataDir)
  try {
    return openDatabase(dataDir, { onMigration: (step, index, pending) => { progress.update(index, pending, `migrating the database (${step.version}: ${step.description})`) } })
  } finally {
    progress.end()
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
