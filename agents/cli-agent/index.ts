import { capBridge, defineAgent } from '../../src/agents/index.js'

/**
 * Wraps a command-line agent (CLI_AGENT_COMMAND; by default the bundled demo-cli.mjs) run as a
 * subprocess per session (for the length of a request) in its own workspace under DATA_DIR/workspaces. Its output streams as
 * DELTAs, its reasoning as thoughts; the conversation is kept in the CAP session, so the next
 * request in the same session continues it, even after a restart.
 */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a07',
      name: 'cli-agent',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-22T00:00:00.000Z'
    },
    capabilities: [{
      name: 'run',
      description: 'Send the query to the local command-line agent and stream its answer',
      delivery_mode: 'server_sent_events',
      inputs: {
        type: 'object',
        properties: { query: { type: 'string', minLength: 1, maxLength: 100000 } },
        required: ['query']
      }
    }]
  },
  backends: ['local'],
  async assist (request, session, response, host) {
    const local = host.backend('local')
    const bridge = capBridge(response, 'Output')
    const ctx = { signal: response.signal, memory: session, onStreamMessage: bridge.onStreamMessage }
    try {
      await local.resume(request.session_id, [{ role: 'user', content: String(request.payload.query) }], ctx)
    } catch (err) {
      if (!response.signal.aborted) await bridge.abort('the local agent failed')
      throw err
    } finally {
      // one process per session while a request runs: the next request respawns it with the history
      await local.stop(request.session_id)
    }
    await bridge.finish()
  }
})
