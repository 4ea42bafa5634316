import t from 'tap'
import { execFile } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, renameSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { promisify } from 'node:util'

// Issue 17: after an agent's folder is deleted or renamed, the next build must not serve its old
// compiled copy (a stale dist/agents/<name> stopped the boot, or doubled an id). The real build
// (`npm run build`) runs twice in a copy of the project.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const run = promisify(execFile)

t.test('the build serves only the agents whose sources are there: a deleted and a renamed agent leave nothing behind', { timeout: 240_000 }, async (t) => {
  const copy = mkdtempSync(join(tmpdir(), 'agent-host-build-'))
  t.teardown(() => { rmSync(copy, { recursive: true, force: true }) })
  for (const entry of ['src', 'agents', 'client', 'package.json', 'tsconfig.json', 'tsconfig.build.json']) {
    cpSync(join(ROOT, entry), join(copy, entry), { recursive: true, filter: (source) => !source.includes(`${join('client', 'dist')}`) && !source.endsWith('node_modules') })
  }
  symlinkSync(join(ROOT, 'node_modules'), join(copy, 'node_modules'), 'dir')
  const build = async (): Promise<void> => { await run('npm', ['run', 'build'], { cwd: copy, env: { ...process.env, npm_config_loglevel: 'error' } }) }

  await build()
  t.ok(existsSync(join(copy, 'dist/agents/wordcount/index.js')))
  rmSync(join(copy, 'agents/wordcount'), { recursive: true })
  renameSync(join(copy, 'agents/echo'), join(copy, 'agents/echo-renamed'))
  await build()
  t.notOk(existsSync(join(copy, 'dist/agents/wordcount')), 'the deleted agent is gone from the build')
  t.notOk(existsSync(join(copy, 'dist/agents/echo')), 'the renamed agent\'s old folder is gone')
  t.ok(existsSync(join(copy, 'dist/agents/echo-renamed/index.js')))

  // and the built server boots on it: the loader sees each agent once
  const { loadAgents } = await import(pathToFileURL(join(copy, 'dist/src/agents/loader.js')).href) as typeof import('../../src/agents/loader.js')
  const { registry, taskAgents } = await loadAgents(join(copy, 'dist/agents'))
  const names = registry.list().map((h) => h.manifest.metadata.name)
  t.ok(names.includes('echo'), 'the renamed folder still holds the echo agent')
  t.equal(names.filter((n) => n === 'echo').length, 1, 'once')
  t.notOk(taskAgents.some((a) => a.agent.agentType === 'wordcount'), 'no wordcount task agent')
})
