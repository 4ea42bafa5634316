import { defineAgent } from '../../../src/agents/index.js'
import { toneWav } from '../_media/index.js'

/** The conformance suite's `test_audio_content` (`tools-call-audio`): audio in a `data:` URL is MCP audio content. */
export default defineAgent({
  manifest: {
    metadata: { id: '37f917d4-61d6-4e36-8bfc-4cc80ca7f471', name: 'test_audio_content', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'audio_content', description: 'Answer with a short 440 Hz tone (WAV)' }]
  },
  async assist (_request, _session, response) {
    await response.media([{ url: toneWav(), mime_type: 'audio/wav', alt_text: 'A 440 Hz tone' }])
  }
})
