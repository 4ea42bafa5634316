import { defineAgent } from '../../src/agents/index.js'

/**
 * Human in the loop: asks its caller a question (`payload.question`, or `payload.query`: what a chat
 * front end sends as the user's message) and answers with what it was told; with `payload.approve: true` it asks for an approval instead. The run stops while it waits
 * (no process holds it) and goes on when a request in the same session answers (`payload.resume`).
 */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a0e',
      name: 'ask',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-29T00:00:00.000Z'
    },
    capabilities: [{
      name: 'ask',
      description: 'Ask the caller a question (or for an approval), then answer with what it said',
      delivery_mode: 'request_response',
      inputs: {
        type: 'object',
        properties: {
          question: { type: 'string', minLength: 1, maxLength: 2000 },
          query: { type: 'string', minLength: 1, maxLength: 2000, description: 'the question, as a chat front end sends its message (AI SDK, AG-UI): used when `question` is not given' },
          approve: { type: 'boolean', description: 'ask for an approval (approve or reject) instead of an answer' },
          expires_in_s: { type: 'integer', minimum: 1, description: 'how long the question waits for its answer' }
        },
        anyOf: [{ required: ['question'] }, { required: ['query'] }],
        additionalProperties: false
      },
      outputs: {
        type: 'object',
        properties: {
          question: { type: 'string' },
          answer: { type: 'string' },
          approved: { type: 'boolean' },
          comment: { type: 'string' }
        },
        required: ['question'],
        additionalProperties: false
      }
    }]
  },
  async assist (request, _session, response) {
    const question = String(request.payload.question ?? request.payload.query)
    const expires = typeof request.payload.expires_in_s === 'number' ? { expires_in_s: request.payload.expires_in_s } : {}
    await response.thought(`Asking: ${question}`)
    if (request.payload.approve === true) {
      const { approved, comment } = await response.interrupt({ kind: 'approval', message: question, ...expires })
      await response.result({ question, approved, ...(comment !== undefined ? { comment } : {}) })
      return
    }
    const { answer } = await response.interrupt<{ answer: string }>({
      kind: 'input',
      message: question,
      schema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
      ...expires
    })
    await response.result({ question, answer })
  }
})
