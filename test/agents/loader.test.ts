import t from 'tap'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildApp } from '../../src/app.js'
import { loadAgents } from '../../src/agents/loader.js'
import { tempDataDir, testConfig, type Teardown } from '../helper.js'

const SRC = fileURLToPath(new URL('../../src/agents/index.js', import.meta.url))

const manifest = (over: Record<string, unknown> = {}, metadata: Record<string, unknown> = {}) => ({
  metadata: { id: 'a0000000-0000-4000-8000-000000000001', name: 'good', version: '1.0.0', author: 'tests', created_at: '2026-01-01T00:00:00Z', ...metadata },
  capabilities: [{ name: 'main', description: 'd' }],
  ...over
})

/** Write agent folders into a fresh AGENTS_DIR: name → source of its index.ts. */
function agentsDir (t: Teardown, files: Record<string, string>, esm = true): string {
  const dir = tempDataDir(t)
  if (esm) writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  for (const [path, source] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true })
    writeFileSync(join(dir, path), source)
  }
  return dir
}

const plain = (m: unknown, extra = '') => `export default { manifest: ${JSON.stringify(m)}, async assist () {} ${extra} }\n`

async function rejects (t: Tap, dir: string, code: string, file: string, reason: RegExp): Promise<void> {
  const err = await buildApp(testConfig(t, { AGENTS_DIR: dir })).then(() => undefined, (e: unknown) => e as { code: string, message: string })
  t.ok(err, 'buildApp rejects')
  t.equal(err?.code, code)
  t.ok(err?.message.includes(join(dir, file)), `names ${file}: ${err?.message ?? ''}`)
  t.match(err?.message, reason)
}
type Tap = Teardown & { ok: (v: unknown, m?: string) => void, equal: (a: unknown, b: unknown) => void, match: (a: unknown, b: unknown) => void }

const cases: Array<[string, string, RegExp]> = [
  ['a string', 'export default "agent"\n', /default export must be an agent object.*got string/],
  ['a function', 'export default function agent () {}\n', /got function/],
  ['no default export', 'export const agent = {}\n', /got undefined/],
  ['null', 'export default null\n', /got null/],
  ['no assist', `export default { manifest: ${JSON.stringify(manifest())} }\n`, /no assist/],
  ['no manifest', 'export default { async assist () {} }\n', /no manifest/],
  ['no metadata', 'export default { manifest: {}, async assist () {} }\n', /metadata is required/],
  ['startup not a function', plain(manifest(), ', startup: 5'), /startup must be a function/],
  ['throws on import', 'throw new Error("kaboom")\n', /import failed: kaboom/],
  ['non-uuid id', plain(manifest({}, { id: 'nope' })), /metadata\/id must match format "uuid"/],
  ['bad semver', plain(manifest({}, { version: '1.0' })), /metadata\/version must be a semantic version such as 1\.0\.0/],
  ['empty name', plain(manifest({}, { name: '' })), /metadata\/name must NOT have fewer than 1/],
  ['extra metadata key', plain(manifest({}, { colour: 'red' })), /metadata\/colour must NOT have additional properties/],
  ['extra top-level key', plain(manifest({ agentType: 'x' })), /manifest\/agentType must NOT have additional properties/],
  ['bad delivery mode', plain(manifest({ capabilities: [{ name: 'm', description: 'd', delivery_mode: 'SSE' }] })), /delivery_mode/],
  // regression (issue 31): the message was Ajv's "must be equal to constant" twice and "must match a schema in anyOf"
  ['delivery mode "json"', plain(manifest({ capabilities: [{ name: 'm', description: 'd', delivery_mode: 'json' }] })), /: manifest\/capabilities\/0\/delivery_mode must be one of "request_response", "server_sent_events"$/],
  ['bad status', plain(manifest({ status: 'live' })), /: manifest\/status must be one of "draft", "published"$/],
  ['temperature 3', plain(manifest({ config: { model_config: { model: 'm', temperature: 3 } } })), /temperature must be <= 2/],
  ['no capabilities', plain(manifest({ capabilities: [] })), /capabilities must NOT have fewer than 1/],
  ['duplicate capability', plain(manifest({ capabilities: [{ name: 'm', description: 'd' }, { name: 'm', description: 'e' }] })), /capability name "m" is used twice/],
  ['auth without user_context', plain(manifest({}, { requires_auth: true })), /must inject "user_context"/],
  ['published without hash', plain(manifest({ status: 'published' })), /published manifest needs integrity_hash/],
  ['interface without schemas is fine but bad schema is not', plain(manifest({ capabilities: [{ name: 'm', description: 'd', inputs: { type: 'nonsense' } }] })), /inputs is not a valid JSON Schema/],
  ['outputs not a schema', plain(manifest({ capabilities: [{ name: 'm', description: 'd', outputs: { properties: 5 } }] })), /outputs is not a valid JSON Schema/]
]

for (const [name, source, reason] of cases) {
  t.test(`a broken agent stops the boot with its path: ${name}`, async (t) => {
    const dir = agentsDir(t, { 'broken/index.ts': source })
    await rejects(t as unknown as Tap, dir, 'AH_ERR_AGENT_INVALID', 'broken/index.ts', reason)
  })
}

t.test('two agents with one id, or one name, stop the boot naming both files', async (t) => {
  const byId = agentsDir(t, { 'a/index.ts': plain(manifest()), 'b/index.ts': plain(manifest({}, { name: 'other' })) })
  await rejects(t as unknown as Tap, byId, 'AH_ERR_AGENT_DUPLICATE', 'b/index.ts', new RegExp(`id a0000000-0000-4000-8000-000000000001 is already used by the agent at ${join(byId, 'a/index.ts')}`))
  const byName = agentsDir(t, { 'a/index.ts': plain(manifest()), 'b/index.ts': plain(manifest({}, { id: 'a0000000-0000-4000-8000-000000000002' })) })
  await rejects(t as unknown as Tap, byName, 'AH_ERR_AGENT_DUPLICATE', 'b/index.ts', /name "good" is already used/)
})

t.test('CommonJS agents (exports.default) load too', async (t) => {
  const dir = agentsDir(t, { 'cjs/index.js': `exports.__esModule = true; exports.default = { manifest: ${JSON.stringify(manifest())}, async assist () {} }\n` }, false)
  const { registry } = await loadAgents(dir)
  t.equal(registry.get('good')?.source, join(dir, 'cjs/index.js'))
})

t.test('task agents load beside CAP agents: a BaseAgent, a plain object, or a CAP agent that also works tasks', async (t) => {
  const both = `export default { manifest: ${JSON.stringify(manifest({}, { name: 'both', id: 'a0000000-0000-4000-8000-000000000005' }))}, async assist () {}, agentType: 'both', async handleTask (task) { return { task_id: task.id, outcome: 'completed' } } }\n`
  const dir = agentsDir(t, {
    'base/index.ts': `import { BaseAgent } from ${JSON.stringify(SRC)}\nexport default new (class extends BaseAgent { agentType = 'base'; async handleTask (task) { return { task_id: task.id, outcome: 'completed' } } })()\n`,
    'plain/index.js': "export default { agentType: 'plain', async handleTask (task) { return { task_id: task.id, outcome: 'completed' } }, async onAssign () {} }\n",
    'both/index.js': both,
    'empty/index.js': "export default { agentType: ' ', async handleTask () {} }\n"
  })
  await t.rejects(loadAgents(dir), { code: 'AH_ERR_AGENT_INVALID', message: /empty\/index.js: agentType must not be empty/ })
  const { rmSync } = await import('node:fs')
  rmSync(join(dir, 'empty'), { recursive: true })
  const { registry, taskAgents } = await loadAgents(dir)
  t.same(taskAgents.map((a) => a.agent.agentType).sort(), ['base', 'both', 'plain'])
  t.same(registry.list().map((h) => h.manifest.metadata.name), ['both'])
})

t.test('a missing AGENTS_DIR stops the boot naming it', async (t) => {
  const dir = join(tempDataDir(t), 'nowhere')
  await t.rejects(buildApp(testConfig(t, { AGENTS_DIR: dir })), { code: 'AH_ERR_AGENT_INVALID', message: new RegExp(`${dir}.*cannot read the agents folder`) })
})

t.test('hidden and underscore folders, plain files and folders without an entry are not agents; index.js wins over index.ts', async (t) => {
  const dir = agentsDir(t, {
    '.hidden/index.ts': 'throw new Error("never imported")\n',
    '_shared/index.ts': 'throw new Error("never imported")\n',
    'notes/README.md': '# not an agent\n',
    'both/index.js': plain(manifest({}, { name: 'from-js' })),
    'both/index.ts': 'throw new Error("the .ts is not used")\n',
    'README.md': 'top-level file'
  })
  const { registry, skipped } = await loadAgents(dir)
  t.same(registry.list().map((h) => h.manifest.metadata.name), ['from-js'])
  t.same(skipped, [join(dir, 'notes')])
})

t.test('plain-object agents with no imports work, and defineAgent agents from the package entry', async (t) => {
  const dir = agentsDir(t, {
    'plain/index.js': plain(manifest()),
    'typed/index.ts': `import { defineAgent } from ${JSON.stringify(SRC)}\nexport default defineAgent({ manifest: ${JSON.stringify(manifest({}, { id: 'a0000000-0000-4000-8000-000000000003', name: 'typed' }))}, async assist (r, s, response) { await response.result({ ok: true }) } })\n`
  })
  const app = await buildApp(testConfig(t, { AGENTS_DIR: dir }))
  t.teardown(() => app.close())
  t.same(app.agents.list().map((h) => h.manifest.metadata.name), ['good', 'typed'])
  t.same(app.agents.get('good')?.manifest.capabilities[0]?.inputs, { type: 'object' }, 'the loader fills defaults of plain objects too')
})

t.test('startup() runs before the server is ready and shutdown() when it closes; a failing startup shuts down the others', async (t) => {
  const calls: string[] = []
  const g = globalThis as unknown as { lifecycle: string[] }
  g.lifecycle = calls
  const hooks = (name: string) => `, startup () { globalThis.lifecycle.push('${name}:startup') }, shutdown () { globalThis.lifecycle.push('${name}:shutdown') }`
  const dir = agentsDir(t, {
    'a/index.js': plain(manifest({}, { name: 'a' }), hooks('a')),
    'b/index.js': plain(manifest({}, { name: 'b', id: 'a0000000-0000-4000-8000-000000000002' }), hooks('b'))
  })
  const app = await buildApp(testConfig(t, { AGENTS_DIR: dir }))
  t.same(calls, ['a:startup', 'b:startup'])
  await app.close()
  t.same(calls, ['a:startup', 'b:startup', 'b:shutdown', 'a:shutdown'])

  calls.length = 0
  const failing = agentsDir(t, {
    'a/index.js': plain(manifest({}, { name: 'a' }), hooks('a')),
    'b/index.js': plain(manifest({}, { name: 'b', id: 'a0000000-0000-4000-8000-000000000002' }), ', startup () { throw new Error("no model") }'),
    'c/index.js': plain(manifest({}, { name: 'c', id: 'a0000000-0000-4000-8000-000000000003' }), hooks('c'))
  })
  await t.rejects(buildApp(testConfig(t, { AGENTS_DIR: failing })), { code: 'AH_ERR_AGENT_STARTUP', message: /Agent "b" failed in startup\(\): no model/ })
  t.same(calls, ['a:startup', 'a:shutdown'], 'c never started; a was shut down')
})

t.test('a shutdown() that throws is logged and the others still run', async (t) => {
  const calls: string[] = []
  const g = globalThis as unknown as { lifecycle2: string[] }
  g.lifecycle2 = calls
  const dir = agentsDir(t, {
    'a/index.js': plain(manifest({}, { name: 'a' }), ', shutdown () { globalThis.lifecycle2.push("a") }'),
    'b/index.js': plain(manifest({}, { name: 'b', id: 'a0000000-0000-4000-8000-000000000002' }), ', shutdown () { throw new Error("oops") }')
  })
  const app = await buildApp(testConfig(t, { AGENTS_DIR: dir }))
  await app.close()
  t.same(calls, ['a'])
})
