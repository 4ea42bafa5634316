import { capBridge, defineAgent, traceparentOf, type ToolRegistry } from '../../src/agents/index.js'

/** Tools the model may call. Small on purpose: they show the tool loop, not a product. */
const tools: ToolRegistry = {
  current_time: {
    description: 'The current date and time in UTC, as ISO 8601.',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    run: () => new Date().toISOString()
  },
  word_count: {
    description: 'Count the words of a text.',
    parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false },
    run: (args) => String(String(args.text ?? '').split(/\s+/).filter((w) => w !== '').length)
  }
}

/**
 * A chat agent over the configured LLM backend (LLM_PROVIDER: an OpenAI-compatible server or
 * Anthropic). The answer streams as DELTAs; reasoning becomes thoughts; the conversation is kept
 * in the CAP session, so the next request in the same session continues it, even after a restart.
 */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a06',
      name: 'llm-chat',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-22T00:00:00.000Z'
    },
    capabilities: [{
      name: 'chat',
      description: 'Chat with the configured LLM; the session remembers the conversation',
      delivery_mode: 'server_sent_events',
      inputs: {
        type: 'object',
        properties: {
          query: { type: 'string', minLength: 1, maxLength: 100000 },
          system: { type: 'string', maxLength: 20000, description: 'system prompt, used when the session starts' }
        },
        required: ['query']
      }
    }]
  },
  backends: ['llm'],
  async assist (request, session, response, host) {
    const llm = host.backend('llm')
    const bridge = capBridge(response)
    const ctx = { signal: response.signal, memory: session, onStreamMessage: bridge.onStreamMessage, tools, traceparent: traceparentOf(request.context.trace) }
    const message = { role: 'user' as const, content: String(request.payload.query) }
    const started = await session.get<boolean>('llm.started', false)
    if (started !== true) {
      const system = typeof request.payload.system === 'string' ? request.payload.system : undefined
      await llm.start({ sessionId: request.session_id, ...(system !== undefined ? { system } : {}) }, ctx)
      await session.store('llm.started', true)
    }
    try {
      await llm.resume(request.session_id, [message], ctx)
    } catch (err) {
      if (!response.signal.aborted) await bridge.abort('the backend failed')
      throw err
    }
    await bridge.finish()
  }
})
