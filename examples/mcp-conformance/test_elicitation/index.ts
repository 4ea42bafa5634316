import { defineAgent } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_elicitation` (`tools-call-elicitation`): an `input` interrupt whose
 * schema is an object of strings is asked as an `elicitation/create` form with that schema, and an
 * accepted form's content is its answer. (A declined or cancelled form ends the run: the host
 * answers the call with an error saying so, and the agent does not see it.)
 */
export default defineAgent({
  manifest: {
    metadata: { id: 'f676a4c8-bdc6-4efd-b86b-00ae0a8444b3', name: 'test_elicitation', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{
      name: 'elicitation',
      description: 'Ask the user for a user name and an email address, and answer with them',
      inputs: {
        type: 'object',
        properties: { message: { type: 'string', minLength: 1, description: 'The message to show the user' } },
        required: ['message']
      }
    }]
  },
  async assist (request, _session, response) {
    const answer = await response.interrupt<{ username: string, email: string }>({
      kind: 'input',
      message: String(request.payload.message),
      schema: {
        type: 'object',
        properties: {
          username: { type: 'string', description: 'User\'s response' },
          email: { type: 'string', description: 'User\'s email address' }
        },
        required: ['username', 'email']
      }
    })
    await response.markdown(`User response: action=accept, content=${JSON.stringify(answer)}`)
  }
})
