import { accessSync, constants } from 'node:fs'
import { delimiter, join } from 'node:path'

/**
 * Programs some tests run that `npm ci` does not install: each comes from the Debian package of the
 * same name (`apt-get install -y chromium jq sqlite3 tini`). Without one, the tests that need it
 * are skipped, loudly, naming the package; with `AGENT_HOST_REQUIRE_PROGRAMS=1` (`.ci/run`, which
 * installs them) they run, and fail if it is missing. As PostgreSQL's tests do (test/pg.ts).
 */
export type HostProgram = 'chromium' | 'jq' | 'sqlite3' | 'tini'

/** Whether `program` is an executable file on PATH (or, for chromium, at CHROMIUM_PATH when it is set). */
export function hasProgram (program: HostProgram, env: NodeJS.ProcessEnv = process.env): boolean {
  const candidates = program === 'chromium' && env.CHROMIUM_PATH !== undefined
    ? [env.CHROMIUM_PATH]
    : (env.PATH ?? '').split(delimiter).filter((dir) => dir !== '').map((dir) => join(dir, program))
  return candidates.some((file) => {
    try {
      accessSync(file, constants.X_OK)
      return true
    } catch {
      return false
    }
  })
}

/** A test's `skip`: false when every program is here (or they are required), else the reason, naming the packages to install. */
export function needsPrograms (programs: HostProgram[], env: NodeJS.ProcessEnv = process.env): string | false {
  if (env.AGENT_HOST_REQUIRE_PROGRAMS === '1') return false
  const missing = programs.filter((program) => !hasProgram(program, env))
  return missing.length === 0 ? false : `SKIPPED: no ${missing.join(', ')} on this machine (apt-get install -y ${missing.join(' ')}; .ci/run installs them and requires them with AGENT_HOST_REQUIRE_PROGRAMS=1)`
}
