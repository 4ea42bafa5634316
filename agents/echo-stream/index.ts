import { setTimeout as sleep } from 'node:timers/promises'
import { defineAgent } from '../../src/agents/index.js'

/** The seed's EchoAgent: a thought, then the query's words on a stream, one every `delay_ms`, then close. */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a02',
      name: 'echo-stream',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-22T00:00:00.000Z'
    },
    capabilities: [{
      name: 'echo-stream',
      description: 'Stream the query back word by word',
      delivery_mode: 'server_sent_events',
      inputs: {
        type: 'object',
        properties: {
          query: { type: 'string', maxLength: 100000 },
          delay_ms: { type: 'integer', minimum: 0, maximum: 5000, default: 100 }
        },
        required: ['query']
      }
    }]
  },
  async assist (request, session, response) {
    await response.thought('Processing request...')
    const stream = await response.create_stream('Echo Response')
    const delay = typeof request.payload.delay_ms === 'number' ? request.payload.delay_ms : 100
    try {
      // one word at a time: a slow stream holds its query, not a copy of every word (bench/idle.js)
      for (const [word] of String(request.payload.query).matchAll(/\S+/g)) {
        await stream.write(word + ' ')
        if (delay > 0) await sleep(delay, undefined, { signal: response.signal })
      }
      await stream.close()
    } catch (err) {
      // once the signal has fired the host has already ended the response
      if (response.signal.aborted) return
      await stream.abort(String(err))
      await response.error('Failed to stream response')
    }
  }
})
