import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** What a boot logged, kept in DATA_DIR for the next restart to compare with (`LOG_BOOT=changes`). */
export interface BootRecord {
  /** The process that started this server (`npm run dev`'s watcher): a boot with the same parent is a restart. */
  parent: number
  /** Every line the boot logged, level, message and fields, as comparable text. */
  lines: string[]
}

/** The file in DATA_DIR that holds the last boot's {@link BootRecord}. */
export const BOOT_RECORD = 'last-boot.json'

/** Pino's `hooks.logMethod`: each log call, with the arguments given and the level's number. */
type LogMethod = (this: unknown, args: unknown[], method: (...args: unknown[]) => void, level: number) => void

/** A line's comparable text: errors by name and message (their stacks differ from run to run). */
function lineKey (level: number, args: unknown[]): string {
  return `${level} ${JSON.stringify(args, (_key, value: unknown) => value instanceof Error ? `${value.name}: ${value.message}` : value)}`
}

/**
 * The start-up log of a server restarted by a watcher (`npm run dev`: scripts/dev.mjs starts a new
 * process on every save). The first start logs every line; a restart (the record in DATA_DIR was
 * written by a boot with the same parent process) logs only the lines that differ from the last
 * boot's (a new agent, a new warning), then {@link finish} says in one line what it left out.
 * Lines logged after the boot (requests, shutdown) always pass. Give {@link logMethod} to the
 * logger (`buildApp`'s `bootLog`).
 */
export class BootLog {
  readonly #dataDir: string
  readonly #parent: number
  readonly #previous: Set<string> | undefined
  readonly #lines: string[] = []
  #booting = true
  #leftOut = { warnings: 0, others: 0 }

  /**
   * @param dataDir the server's DATA_DIR, where the last boot's record is read and this one's written
   * @param parent the process that started this one (`process.ppid`)
   */
  constructor (dataDir: string, parent: number) {
    this.#dataDir = dataDir
    this.#parent = parent
    this.#previous = BootLog.#read(dataDir, parent)
  }

  static #read (dataDir: string, parent: number): Set<string> | undefined {
    try {
      const record = JSON.parse(readFileSync(join(dataDir, BOOT_RECORD), 'utf8')) as Partial<BootRecord>
      return record.parent === parent && Array.isArray(record.lines) ? new Set(record.lines.map(String)) : undefined
    } catch {
      return undefined // no record (a first start, a fresh DATA_DIR) or an unreadable one: log everything
    }
  }

  /** Whether this boot is a restart by the same parent, which logs only what changed. */
  get restart (): boolean { return this.#previous !== undefined }

  /** Pino's `hooks.logMethod`: records each boot line, and on a restart drops those the last boot logged too. */
  readonly logMethod: LogMethod = ((boot: BootLog): LogMethod => function (this: unknown, args, method, level) {
    if (boot.#booting) {
      const key = lineKey(level, args)
      boot.#lines.push(key)
      if (boot.#previous?.has(key) === true) {
        if (level >= 40) boot.#leftOut.warnings++
        else boot.#leftOut.others++
        return
      }
    }
    method.apply(this, args) // pino's method needs its logger
  })(this)

  /**
   * The boot is over (the server listens): write this boot's record for the next restart, and
   * return the line a restart logs in place of those it left out (undefined on a first start).
   */
  finish (about: string): string | undefined {
    this.#booting = false
    try {
      writeFileSync(join(this.#dataDir, BOOT_RECORD), JSON.stringify({ parent: this.#parent, lines: this.#lines } satisfies BootRecord))
    } catch {} // the next restart then logs everything, which is only longer
    if (!this.restart) return undefined
    const { warnings, others } = this.#leftOut
    return `restarted: ${about}; ${warnings} warning${warnings === 1 ? '' : 's'} and ${others} other line${others === 1 ? '' : 's'} of the start-up log as before, not repeated`
  }
}
