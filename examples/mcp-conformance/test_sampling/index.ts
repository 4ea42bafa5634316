import { defineAgent } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_sampling` (`tools-call-sampling`): the `mcp-sampling` backend is the
 * calling MCP client's own model (`sampling/createMessage`), used as any other LLM backend.
 */
export default defineAgent({
  manifest: {
    metadata: { id: 'f1853697-7ec2-4ac0-856a-6a944490b5a6', name: 'test_sampling', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{
      name: 'sampling',
      description: 'Ask the calling client\'s model, and answer with what it said',
      inputs: {
        type: 'object',
        properties: { prompt: { type: 'string', minLength: 1, description: 'The prompt to send to the LLM' } },
        required: ['prompt']
      }
    }]
  },
  backends: ['mcp-sampling'],
  async assist (request, _session, response, host) {
    const llm = host.backend('mcp-sampling')
    const context = { signal: response.signal }
    const id = await llm.start({}, context)
    try {
      const answer = await llm.send(id, [{ role: 'user', content: String(request.payload.prompt) }], context)
      await response.markdown(`LLM response: ${answer.content}`)
    } finally {
      await llm.stop(id)
    }
  }
})
