import t from 'tap'
import { defineAgent, fillManifest } from '../../src/agents/define-agent.js'
import { hostAgent } from '../../src/agents/hosted-agent.js'
import { AgentRegistry } from '../../src/agents/registry.js'

const metadata = { id: 'c0000000-0000-4000-8000-000000000001', name: 'm', version: '2.1.0-beta.1+build.5', author: 'a', created_at: '2026-01-01T00:00:00Z' }

t.test('fillManifest fills every default of CAP.md §7', async (t) => {
  const filled = fillManifest({ metadata, capabilities: [{ name: 'a', description: 'x' }, { name: 's', description: 'y', delivery_mode: 'server_sent_events' }, { name: 'i', description: 'z', interface_id: 'c0000000-0000-4000-8000-0000000000ff' }] })
  t.same(filled, {
    metadata: { ...metadata, requires_auth: false },
    capabilities: [
      { name: 'a', description: 'x', type: 'atomic', delivery_mode: 'request_response', events: [], injected_params: [], inputs: { type: 'object' }, outputs: { type: 'object' } },
      { name: 's', description: 'y', type: 'streaming', delivery_mode: 'server_sent_events', events: [], injected_params: [], inputs: { type: 'object' }, outputs: { type: 'object' } },
      { name: 'i', description: 'z', interface_id: 'c0000000-0000-4000-8000-0000000000ff', type: 'atomic', delivery_mode: 'request_response', events: [], injected_params: [] }
    ],
    config: { nodes: [], edges: [], model_config: { model: 'none', temperature: 0 } },
    dependencies: { tools: [], libraries: [] },
    status: 'draft'
  })
  t.same(fillManifest({ metadata }).capabilities, [{ name: 'assist', description: 'Ask m', type: 'atomic', delivery_mode: 'request_response', events: [], injected_params: [], inputs: { type: 'object' }, outputs: { type: 'object' } }])
})

t.test('fillManifest keeps what the author wrote and is idempotent', async (t) => {
  const spec = {
    metadata: { ...metadata, requires_auth: true },
    capabilities: [{ name: 'a', description: 'x', type: 'streaming' as const, injected_params: ['user_context'], events: [{ name: 'E', data_schema: { type: 'object' } }] }],
    config: { model_config: { model: 'gpt', temperature: 0.7, system_prompt: 'be brief' }, entry_point: 'n1' },
    dependencies: { libraries: ['x'] },
    policy: { budget_caps: { usd: 1 }, human_in_the_loop: [], allowed_domains: ['example.org'] },
    custom_metadata: { agentType: 'wordcount' },
    status: 'published' as const,
    integrity_hash: 'a'.repeat(64)
  }
  const filled = fillManifest(spec)
  t.match(filled, { ...spec, config: { ...spec.config, nodes: [], edges: [] }, dependencies: { tools: [], libraries: ['x'] } })
  t.same(fillManifest(filled), filled)
  t.doesNotThrow(() => hostAgent({ manifest: spec, async assist () {} }, 'test'))
})

t.test('defineAgent returns the author\'s functions with a filled manifest', async (t) => {
  const assist = async (): Promise<void> => {}
  const startup = (): void => {}
  const agent = defineAgent({ manifest: { metadata }, assist, startup })
  t.equal(agent.assist, assist)
  t.equal(agent.startup, startup)
  t.equal(agent.manifest.status, 'draft')
})

t.test('hostAgent compiles the capability schemas', async (t) => {
  const hosted = hostAgent(defineAgent({ manifest: { metadata, capabilities: [{ name: 'a', description: 'x', inputs: { type: 'object', required: ['q'] } }] }, async assist () {} }), 'here')
  t.equal(hosted.source, 'here')
  t.equal(hosted.capabilities[0]?.validateInput?.({}), false)
  t.equal(hosted.capabilities[0]?.validateInput?.({ q: 1 }), true)
  t.equal(hosted.capabilities[0]?.validateOutput?.({}), true)
})

t.test('the registry finds agents by id in any case or by name, and refuses duplicates', async (t) => {
  const registry = new AgentRegistry()
  const a = hostAgent({ manifest: { metadata }, async assist () {} }, 'a.ts')
  registry.add(a)
  t.equal(registry.size, 1)
  t.equal(registry.get(metadata.id.toUpperCase()), a)
  t.equal(registry.get('m'), a)
  t.equal(registry.get('M'), undefined, 'names are case-sensitive')
  t.throws(() => registry.add(hostAgent({ manifest: { metadata: { ...metadata, name: 'other' } }, async assist () {} }, 'b.ts')), /id c0000000-0000-4000-8000-000000000001 is already used by the agent at a.ts/)
  t.throws(() => registry.add(hostAgent({ manifest: { metadata: { ...metadata, id: 'c0000000-0000-4000-8000-000000000002' } }, async assist () {} }, 'c.ts')), /name "m" is already used/)
})

t.test('a bad manifest is one readable line per problem: a bad version says what a version is, not its regular expression', async (t) => {
  const err = t.throws(() => hostAgent({ manifest: { metadata: { ...metadata, version: '1.0' } }, async assist () {} }, 'test')) as Error
  t.match(err.message, /manifest\/metadata\/version must be a semantic version such as 1\.0\.0/)
  t.notMatch(err.message, /\(0\|\[1-9\]/, 'no regular expression')
})
