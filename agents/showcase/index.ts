import { defineAgent } from '../../src/agents/index.js'

/** Emits one of every presentation event (and data, a stream and a result), for front-end work. */
export default defineAgent({
  manifest: {
    metadata: {
      id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a03',
      name: 'showcase',
      version: '1.0.0',
      author: 'agent-host',
      created_at: '2026-11-22T00:00:00.000Z'
    },
    capabilities: [{
      name: 'showcase',
      description: 'Show every presentation event type: thought, progress, markdown, data, citations, media, a stream',
      delivery_mode: 'server_sent_events',
      inputs: { type: 'object', properties: { topic: { type: 'string', maxLength: 200 } } }
    }]
  },
  async assist (request, session, response) {
    const topic = typeof request.payload.topic === 'string' ? request.payload.topic : 'agent hosting'
    await response.thought(`Planning an answer about ${topic}`)
    await response.progress('Gathering sources', 'running', 0.25)
    await response.citations([
      { source_id: 'cap', uri: 'https://example.org/cap', title: 'Coreason Agent Protocol', snippet: 'One envelope, two delivery modes.', confidence: 0.9 },
      { source_id: 'sse', uri: 'https://html.spec.whatwg.org/multipage/server-sent-events.html', title: 'Server-sent events', confidence: 0.75 }
    ])
    await response.progress('Gathering sources', 'complete', 1)
    await response.markdown(`## ${topic}\n\nThis answer shows **every** event type a CAP front end renders.\n`)
    await response.data({ topic, words: topic.split(/\s+/).length, modes: ['request_response', 'server_sent_events'] }, 'Facts', 'TABLE')
    await response.media([{ url: 'https://example.org/diagram.png', mime_type: 'image/png', alt_text: `A diagram of ${topic}` }])
    const stream = await response.create_stream('Summary', { language: 'en' })
    for (const part of ['Streams ', 'carry ', 'text ', 'deltas.']) await stream.write(part)
    await stream.close()
    await response.thought('Done', 'COMPLETE')
  }
})
