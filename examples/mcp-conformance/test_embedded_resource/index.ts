import { defineAgent } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_embedded_resource` (`tools-call-embedded-resource`): a DATA event is
 * an embedded resource, its JSON the resource's text (`application/json`, named `urn:uuid:<event id>`).
 */
export default defineAgent({
  manifest: {
    metadata: { id: 'e0ff3adf-d8c2-41db-af8c-f9afedc21386', name: 'test_embedded_resource', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'embedded_resource', description: 'Answer with an embedded resource' }]
  },
  async assist (_request, _session, response) {
    await response.data({ text: 'This is an embedded resource content.' }, 'Embedded resource')
  }
})
