import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import type { Teardown } from './helper.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))

/** Another process that holds (or, on demand, takes) the database's write lock until released. */
export interface LockHolder {
  child: ChildProcess
  /** Take the lock now (on-demand holders); resolves once it is held. */
  lock: () => Promise<void>
  /** Kill the holder and wait for it: the lock is free again. */
  release: () => Promise<void>
}

async function line (child: ChildProcess, text: string): Promise<void> {
  let seen = ''
  await new Promise<void>((resolve, reject) => {
    const onData = (c: Buffer): void => {
      seen += c.toString()
      if (seen.includes(`${text}\n`)) { child.stdout?.off('data', onData); resolve() }
    }
    child.stdout?.on('data', onData)
    child.once('exit', () => { reject(new Error(`the lock holder exited before saying ${text}`)) })
  })
}

/**
 * Start a process that holds `dataDir`'s database lock: at once (default), or when {@link LockHolder.lock}
 * is called (`onDemand`). Killed in teardown.
 */
export async function holdDbLock (t: Teardown, dataDir: string, onDemand = false): Promise<LockHolder> {
  const child = spawn(process.execPath, [...process.execArgv, 'test/fixtures/scripts/hold-db-lock.ts', dataDir, ...(onDemand ? ['--on-demand'] : [])], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  await line(child, onDemand ? 'ready' : 'locked')
  return {
    child,
    lock: async () => {
      const locked = line(child, 'locked')
      child.stdin?.write('lock\n')
      await locked
    },
    release: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = once(child, 'exit')
      child.kill('SIGKILL')
      await exited
    }
  }
}
