import { defineAgent } from '../../src/agents/index.js'

/** Returns the query it was given, and how many times this session has called it (session memory). */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a01',
      name: 'echo',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-22T00:00:00.000Z'
    },
    capabilities: [{
      name: 'echo',
      description: 'Answer with the query, as one JSON result',
      delivery_mode: 'request_response',
      inputs: {
        type: 'object',
        properties: { query: { type: 'string', maxLength: 100000 } },
        required: ['query']
      },
      outputs: {
        type: 'object',
        properties: { echo: { type: 'string' }, calls: { type: 'integer', minimum: 1 } },
        required: ['echo', 'calls'],
        additionalProperties: false
      }
    }]
  },
  async assist (request, session, response) {
    const calls = (await session.get<number>('calls', 0) ?? 0) + 1
    await session.store('calls', calls)
    await response.result({ echo: String(request.payload.query), calls })
  }
})
