import { defineAgent } from '../../../src/agents/index.js'
import { redPixelPng } from '../_media/index.js'

/** The conformance suite's `test_image_content` (`tools-call-image`): an image in a `data:` URL is MCP image content. */
export default defineAgent({
  manifest: {
    metadata: { id: 'f2c2bf8d-0e06-4b57-a11a-ea2b982f0ef5', name: 'test_image_content', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'image_content', description: 'Answer with a 1×1 red PNG' }]
  },
  async assist (_request, _session, response) {
    await response.media([{ url: redPixelPng(), mime_type: 'image/png', alt_text: 'A red pixel' }])
  }
})
