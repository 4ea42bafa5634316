import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { TEST_ENV, type Teardown } from './helper.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))

/** A server running in its own process (`src/server.ts`), for crash, pause and shutdown tests. */
export interface ServerChild {
  child: ChildProcess
  port: number
  url: string
  /** Everything the process printed on stdout so far. */
  stdout: () => string
  /** Resolves with the exit code (or the signal's name) once the process has exited. */
  exited: Promise<number | string>
}

/** Start `src/server.ts` with `env` (PORT 0 on loopback), in `cwd` (default the repository), and wait for its listening line; killed in teardown. */
export async function startServer (t: Teardown, env: Record<string, string>, options: { cwd?: string } = {}): Promise<ServerChild> {
  const child = spawn(process.execPath, [...process.execArgv, join(ROOT, 'src/server.ts')], {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...TEST_ENV, ...env },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  const exited = once(child, 'exit').then(([code, signal]) => (code ?? signal) as number | string)
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  let stdout = ''
  child.stdout?.on('data', (c: Buffer) => { stdout += c.toString() })
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`no listening line within 60 s: ${stdout}`)) }, 60_000)
    const check = (): void => {
      const m = /listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout)
      if (m !== null) { clearTimeout(timer); child.stdout?.off('data', check); resolve(Number(m[1])) }
    }
    child.stdout?.on('data', check)
    exited.then((code) => { clearTimeout(timer); reject(new Error(`server exited (${code}) before listening: ${stdout}`)) }, () => {})
  })
  return { child, port, url: `http://127.0.0.1:${port}`, stdout: () => stdout, exited }
}
