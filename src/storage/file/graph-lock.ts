import { randomBytes, randomInt } from 'node:crypto'
import { mkdir, open, readdir, rename, rm, rmdir, stat, unlink, utimes, type FileHandle } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { AH_ERR_TASK_LOCK_COMPROMISED } from '../../errors.js'

export interface GraphLockOptions {
  /** A lock whose directory was not refreshed for this long is taken over (its holder died or froze). */
  staleMs: number
  /** How often a holder refreshes its lock (well under `staleMs`). */
  updateMs: number
  /** How long {@link GraphLock.acquire} waits for a held lock before failing with `ELOCKED`. */
  waitMs: number
}

/** A held lock: replace the file and let go ({@link commit}), or just let go ({@link release}). */
export interface HeldLock {
  /**
   * Replace the file with the bytes of `data`, in order (written and fsynced), and release the
   * lock. Fenced: when the lock was taken over (this process was paused or cut off past `staleMs`),
   * nothing is written and this throws `AH_ERR_TASK_LOCK_COMPROMISED`.
   * @returns the new file, still open: while the caller keeps it open its inode number cannot be
   *   reused, so a later `stat` of the path with that inode proves the file is still this one
   */
  commit: (data: Buffer[]) => Promise<FileHandle>
  release: () => Promise<void>
}

const errno = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code

/**
 * An exclusive lock on one file that also fences its writes, for processes sharing a directory.
 *
 * The lock is the directory `<file>.lock` (as proper-lockfile makes it, so tools that take the same
 * lock are kept out), and inside it a token file that only its holder knows the name of. A write
 * goes into the token file, which is then renamed over `<file>`: `rename(2)` resolves
 * `<file>.lock/<token>` at the moment it runs, so once the lock has been taken over (its directory
 * moved aside and made anew) the holder's rename fails and nothing is written. A holder that was
 * paused past `staleMs` therefore can never write the stale snapshot it read before the pause
 * (proper-lockfile checks for a takeover only on its refresh timer, which a paused process does not
 * run: one 12 s SIGSTOP reverted 40 completed tasks). Taking the lock is `mkdir` plus the token,
 * then a look at the directory: a second token in it means another process raced in, and the
 * later one backs off, so two processes never both go on.
 */
export class GraphLock {
  readonly file: string
  readonly #dir: string
  readonly #options: GraphLockOptions

  constructor (file: string, options: GraphLockOptions) {
    this.file = file
    this.#dir = `${file}.lock`
    this.#options = options
  }

  /**
   * Remove what crashed processes left: lock directories moved aside and never removed, and temp
   * files of earlier versions (`<file>.<pid>.<hex>.tmp`).
   */
  async sweep (): Promise<void> {
    const name = basename(this.file)
    let entries: string[]
    try {
      entries = await readdir(dirname(this.file))
    } catch (err) {
      if (errno(err) === 'ENOENT') return
      throw err
    }
    await Promise.all(entries
      .filter((e) => e.startsWith(`${name}.lock-stale-`) || (e.startsWith(`${name}.`) && e.endsWith('.tmp')))
      .map(async (e) => { await rm(join(dirname(this.file), e), { recursive: true, force: true }) }))
  }

  /** Take the lock, waiting up to `waitMs` for its holder (a stale lock is taken over). */
  async acquire (): Promise<HeldLock> {
    const deadline = Date.now() + this.#options.waitMs
    for (let wait = 2; ; wait = Math.min(50, Math.ceil(wait * 1.5))) {
      const held = await this.#try()
      if (held !== undefined) return held
      if (Date.now() >= deadline) throw Object.assign(new Error(`Lock on ${this.file} is held by another process`), { code: 'ELOCKED', file: this.file })
      await sleep(randomInt(1, wait + 1))
    }
  }

  async #try (): Promise<HeldLock | undefined> {
    try {
      await mkdir(this.#dir)
    } catch (err) {
      if (errno(err) !== 'EEXIST') throw err
      await this.#takeOverIfStale()
      return undefined
    }
    const token = `${process.pid}-${randomBytes(8).toString('hex')}`
    const tokenPath = join(this.#dir, token)
    let handle: FileHandle
    try {
      handle = await open(tokenPath, 'wx')
    } catch (err) {
      // the directory we made was moved or removed before our token was in it: start again
      if (errno(err) === 'ENOENT') return undefined
      throw err
    }
    const others = (await readdir(this.#dir).catch(() => [] as string[])).filter((e) => e !== token)
    if (others.length > 0) {
      // we raced into a directory another process also took: back off (it sees our token, or we saw its)
      await Promise.all([handle.close(), unlink(tokenPath).catch(() => {})])
      return undefined
    }
    return this.#held(tokenPath, handle)
  }

  async #takeOverIfStale (): Promise<void> {
    let mtime: number
    try {
      mtime = (await stat(this.#dir)).mtimeMs
    } catch (err) {
      if (errno(err) === 'ENOENT') return
      throw err
    }
    if (mtime >= Date.now() - this.#options.staleMs) return
    const aside = `${this.file}.lock-stale-${randomBytes(6).toString('hex')}`
    try {
      await rename(this.#dir, aside)
    } catch (err) {
      if (errno(err) === 'ENOENT') return
      throw err
    }
    await rm(aside, { recursive: true, force: true })
  }

  #held (tokenPath: string, handle: FileHandle): HeldLock {
    let done = false
    const refresh = setInterval(() => {
      const now = new Date()
      // only while our token is there: touching another holder's lock would keep a dead one alive
      stat(tokenPath).then(async () => { await utimes(this.#dir, now, now) }, () => { clearInterval(refresh) }).catch(() => {})
    }, this.#options.updateMs)
    refresh.unref()
    const finish = (): void => {
      done = true
      clearInterval(refresh)
    }
    return {
      commit: async (data) => {
        if (done) throw new Error('the lock was already released')
        finish()
        try {
          const length = data.reduce((n, b) => n + b.length, 0)
          const { bytesWritten } = await handle.writev(data)
          if (bytesWritten !== length) throw new Error(`wrote ${bytesWritten} of ${length} bytes to ${tokenPath}`)
          await handle.sync()
          await rename(tokenPath, this.file)
        } catch (err) {
          await handle.close()
          if (errno(err) === 'ENOENT') throw new AH_ERR_TASK_LOCK_COMPROMISED(this.file, { cause: err })
          await unlink(tokenPath).catch(() => {})
          await rmdir(this.#dir).catch(() => {})
          throw err
        }
        await rmdir(this.#dir).catch(() => {})
        return handle
      },
      release: async () => {
        if (done) return
        finish()
        await handle.close()
        try {
          await unlink(tokenPath)
        } catch {
          return // taken over: the directory is someone else's now
        }
        // fails harmlessly (ENOTEMPTY) should another holder already be in a directory at this path
        await rmdir(this.#dir).catch(() => {})
      }
    }
  }
}
