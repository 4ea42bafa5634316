import { setTimeout as sleep } from 'node:timers/promises'
import { defineAgent } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_reconnection` (`server-sse-polling`): a call that takes a moment.
 * Closing the call's SSE stream mid-call and finishing it on the client's reconnection (SEP-1699) is
 * the host's part, not the agent's: an agent only writes its answer.
 */
export default defineAgent({
  manifest: {
    metadata: { id: 'a7f62ec4-e6b0-4b6a-bb3b-e5b2f4ae2245', name: 'test_reconnection', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'reconnection', description: 'Answer after a tenth of a second' }]
  },
  async assist (_request, _session, response) {
    await sleep(100, undefined, { signal: response.signal })
    await response.markdown('Reconnection test completed successfully.')
  }
})
