// The agent of bench/model-budgets.js: one run makes `calls` LLM calls one after another and says
// how many it made once, at the end, so that a run's own cost (its journal, its answer, its audit
// row) is spread over many backend calls and the budgets' cost per call shows.
// Plain JavaScript with its manifest written out in full (what defineAgent would fill in): it is
// loaded by the built server (dist/) and, under --smoke, by the TypeScript sources alike.
export default {
  manifest: {
    metadata: { id: 'b0000000-0000-4000-8000-0000000000b1', name: 'budget-looper', version: '1.0.0', author: 'bench', created_at: '2026-01-01T00:00:00Z', requires_auth: false },
    capabilities: [{
      name: 'loop',
      description: 'Call the LLM a number of times',
      type: 'atomic',
      delivery_mode: 'request_response',
      events: [],
      injected_params: [],
      inputs: { type: 'object', properties: { query: { type: 'string' }, calls: { type: 'integer', minimum: 1 } }, required: ['query', 'calls'] },
      outputs: { type: 'object' }
    }],
    config: { nodes: [], edges: [], model_config: { model: 'none', temperature: 0 } },
    dependencies: { tools: [], libraries: [] },
    status: 'draft'
  },
  backends: ['llm'],
  async assist (request, _session, response, host) {
    const { query, calls } = request.payload
    const llm = host.backend('llm')
    const sessionId = await llm.start({}, { signal: response.signal })
    for (let i = 1; i <= calls; i++) {
      await llm.send(sessionId, [{ role: 'user', content: `${query} ${i}` }], { signal: response.signal })
    }
    await llm.stop(sessionId)
    await response.markdown(`${calls} calls`)
  }
}
