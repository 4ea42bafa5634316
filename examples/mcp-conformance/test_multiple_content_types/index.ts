import { defineAgent } from '../../../src/agents/index.js'
import { redPixelPng } from '../_media/index.js'

/** The conformance suite's `test_multiple_content_types` (`tools-call-mixed-content`): text, then an image, then a resource. */
export default defineAgent({
  manifest: {
    metadata: { id: 'b3e82f9c-4279-4046-99d9-50023881351c', name: 'test_multiple_content_types', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'multiple_content_types', description: 'Answer with text, an image and an embedded resource' }]
  },
  async assist (_request, _session, response) {
    await response.markdown('Multiple content types test:')
    await response.media([{ url: redPixelPng(), mime_type: 'image/png', alt_text: 'A red pixel' }])
    await response.data({ test: 'data', value: 123 })
  }
})
