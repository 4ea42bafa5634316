import { defineAgent, SafeAgentError } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_error_handling` (`tools-call-error`): a `SafeAgentError` ends the run
 * with its message, a tool result with `isError: true` (any other error's message is hidden).
 */
export default defineAgent({
  manifest: {
    metadata: { id: '0fb5c3d4-eff8-499e-8ce7-a184b820ef32', name: 'test_error_handling', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'error_handling', description: 'Always fail, saying so' }]
  },
  async assist () {
    throw new SafeAgentError('This tool intentionally returns an error for testing')
  }
})
