import { setTimeout as sleep } from 'node:timers/promises'
import { defineAgent } from '../../../src/agents/index.js'

/** The conformance suite's `test_tool_with_logging` (`tools-call-with-logging`): each `log()` line is a logging notification. */
export default defineAgent({
  manifest: {
    metadata: { id: '54131a00-8dff-4db4-9409-105d7fdd6f4f', name: 'test_tool_with_logging', version: '1.0.0', author: 'agent-host', created_at: '2026-11-29T00:00:00.000Z' },
    capabilities: [{ name: 'tool_with_logging', description: 'Log three lines while it works, 50 ms apart' }]
  },
  async assist (_request, _session, response) {
    await response.log('info', 'Tool execution started')
    await sleep(50, undefined, { signal: response.signal })
    await response.log('info', 'Tool processing data')
    await sleep(50, undefined, { signal: response.signal })
    await response.log('info', 'Tool execution completed')
    await response.markdown('Tool with logging executed successfully')
  }
})
