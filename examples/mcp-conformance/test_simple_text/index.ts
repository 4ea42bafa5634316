import { defineAgent } from '../../../src/agents/index.js'

/** The conformance suite's `test_simple_text` (scenario `tools-call-simple-text`): markdown is the tool result's text. */
export default defineAgent({
  manifest: {
    metadata: { id: '98561872-ae62-4c49-959b-5338f075091f', name: 'test_simple_text', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'simple_text', description: 'Answer with one fixed line of text' }]
  },
  async assist (_request, _session, response) {
    await response.markdown('This is a simple text response for testing.')
  }
})
