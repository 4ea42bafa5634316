import { setTimeout as sleep } from 'node:timers/promises'
import { defineAgent } from '../../../src/agents/index.js'

/**
 * The conformance suite's `test_tool_with_progress` (`tools-call-with-progress`): each step that
 * advances `progress()` is a progress notification (`progress` in hundredths, `total` 100) to a
 * client that sent a progress token. MCP's progress must grow with each one: a step at 0 would be a
 * log line, so the steps are a third, two thirds and done.
 */
export default defineAgent({
  manifest: {
    metadata: { id: '9ceef8d9-4776-44ff-890b-3c2d9c8a397c', name: 'test_tool_with_progress', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'tool_with_progress', description: 'Report progress in three steps, 50 ms apart' }]
  },
  async assist (_request, _session, response) {
    await response.progress('Step 1 of 3', 'running', 1 / 3)
    await sleep(50, undefined, { signal: response.signal })
    await response.progress('Step 2 of 3', 'running', 2 / 3)
    await sleep(50, undefined, { signal: response.signal })
    await response.progress('Done', 'complete', 1)
    await response.markdown('Tool with progress executed successfully')
  }
})
