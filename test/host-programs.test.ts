import t from 'tap'
import { chmodSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { hasProgram, needsPrograms } from './host-programs.js'

t.test('a missing program skips its tests, naming the package to install, unless .ci/run requires it', async (t) => {
  const dir = t.testdir({})
  writeFileSync(join(dir, 'jq'), '#!/bin/sh\n')
  chmodSync(join(dir, 'jq'), 0o755)
  writeFileSync(join(dir, 'sqlite3'), 'not executable')
  const env = { PATH: dir }
  t.ok(hasProgram('jq', env))
  t.notOk(hasProgram('sqlite3', env), 'a file that is not executable is not the program')
  t.equal(needsPrograms(['jq'], env), false, 'here: nothing skipped')
  t.equal(needsPrograms(['jq', 'sqlite3', 'tini'], env), 'SKIPPED: no sqlite3, tini on this machine (apt-get install -y sqlite3 tini; .ci/run installs them and requires them with AGENT_HOST_REQUIRE_PROGRAMS=1)')
  t.equal(needsPrograms(['tini'], { ...env, AGENT_HOST_REQUIRE_PROGRAMS: '1' }), false, 'required: the tests run (and fail without it)')
  t.notOk(hasProgram('chromium', { PATH: dir, CHROMIUM_PATH: join(dir, 'nowhere') }), 'chromium is looked for at CHROMIUM_PATH when it is set')
  t.ok(hasProgram('chromium', { PATH: '', CHROMIUM_PATH: join(dir, 'jq') }))
})
