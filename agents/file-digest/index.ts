import { defineAgent, SafeAgentError } from '../../src/agents/index.js'

/**
 * `file-digest`: the A2A and MCP example of docs/mcp.md. It reads a file through the filesystem tool
 * (`host.tools`: the MCP server the operator registered as `fs`, within its path scope) and asks
 * another agent for a summary over A2A (`host.a2a`: the agent the operator registered as
 * `summarizer`), then answers with both. Without `MCP_SERVERS_FILE` and `A2A_AGENTS_FILE` it says
 * what is missing.
 */
export default defineAgent({
  manifest: {
    metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a15', name: 'file-digest', version: '1.0.0', author: 'agent-host', created_at: '2026-11-26T00:00:00.000Z' },
    capabilities: [{
      name: 'brief',
      description: 'Read a file through the fs tool and have the summarizer agent digest it over A2A',
      delivery_mode: 'request_response',
      inputs: { type: 'object', properties: { path: { type: 'string', minLength: 1, maxLength: 1024 } }, required: ['path'] },
      outputs: {
        type: 'object',
        properties: { path: { type: 'string' }, characters: { type: 'integer' }, summary: { type: 'string' }, summarizer: { type: 'object' } },
        required: ['path', 'characters', 'summary', 'summarizer']
      }
    }]
  },
  async assist (request, _session, response, host) {
    if (host.tools === undefined || host.a2a === undefined) throw new SafeAgentError('this host lends no tools or A2A agents: set MCP_SERVERS_FILE and A2A_AGENTS_FILE (docs/mcp.md, "Example: a file read through a tool, summarized by another agent")')
    const path = String(request.payload.path)
    await response.progress(`reading ${path}`, 'running', 0.1)
    const read = await host.tools.call({ tool: 'fs', action: 'read', args: { path }, timeout: 20 })
    if (!read.success) throw new SafeAgentError(`cannot read ${path}: ${String(read.error)}`)
    const text = (read.result as { content: Array<{ type: string, text?: string }> }).content.map((c) => c.text ?? '').join('')
    await response.progress('asking the summarizer', 'running', 0.5)
    const digest = await host.a2a.call('summarizer', 'digest', { query: text }, { timeout: 60, signal: response.signal })
    if (digest.status !== 'success') throw new SafeAgentError(`the summarizer answered ${digest.status}: ${String(digest.metadata.error ?? '')}`)
    // the remote's artifacts: its text, and its result() as data (the one with a summary)
    const artifacts: unknown[] = Array.isArray(digest.result) ? digest.result : [digest.result]
    const found = artifacts.find((a): a is { summary: unknown } => typeof a === 'object' && a !== null && 'summary' in a)
    const summary = String(found?.summary ?? artifacts.find((a) => typeof a === 'string') ?? '')
    await response.progress('done', 'complete', 1)
    await response.markdown(`**${path}** (${text.length} characters): ${summary}`)
    await response.result({ path, characters: text.length, summary, summarizer: { status: digest.status, task_id: digest.metadata.task_id ?? null, duration_ms: digest.metadata.duration_ms ?? null } })
  }
})
