import { defineAgent } from '../../src/agents/index.js'

/** The sentences of `text` (split after `.`, `!` or `?` and a space or line end). */
function sentences (text: string): string[] {
  return text.replace(/\s+/g, ' ').trim().split(/(?<=[.!?])\s+/).filter((s) => s !== '')
}

/**
 * `digest`: a short extractive summary of a text (its first sentences, up to `max_chars`) and its
 * size. Deterministic, no backend: the other agent of the A2A and MCP example of docs/mcp.md, which
 * `file-digest` asks over A2A.
 */
export default defineAgent({
  manifest: {
    metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a14', name: 'digest', version: '1.0.0', author: 'agent-host', created_at: '2026-11-26T00:00:00.000Z' },
    capabilities: [{
      name: 'digest',
      description: 'Summarize a text: its first sentences and how long it is',
      delivery_mode: 'request_response',
      inputs: {
        type: 'object',
        properties: { query: { type: 'string', minLength: 1, maxLength: 1000000 }, max_chars: { type: 'integer', minimum: 40, maximum: 4000 } },
        required: ['query']
      },
      outputs: {
        type: 'object',
        properties: { summary: { type: 'string' }, words: { type: 'integer' }, sentences: { type: 'integer' } },
        required: ['summary', 'words', 'sentences']
      }
    }]
  },
  async assist (request, _session, response) {
    const text = String(request.payload.query)
    const max = typeof request.payload.max_chars === 'number' ? request.payload.max_chars : 280
    const all = sentences(text.replace(/^#+ .*$/gm, '').replace(/[`*_]/g, ''))
    let summary = ''
    for (const sentence of all) {
      if (summary !== '' && summary.length + sentence.length + 1 > max) break
      summary = summary === '' ? sentence.slice(0, max) : `${summary} ${sentence}`
    }
    await response.markdown(summary)
    await response.result({ summary, words: text.split(/\s+/).filter((w) => w !== '').length, sentences: all.length })
  }
})
