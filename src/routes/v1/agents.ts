import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { HostedAgent } from '../../agents/hosted-agent.js'
import { AH_ERR_AGENT_NOT_FOUND } from '../../errors.js'
import { AgentDefinition, AgentList } from '../../protocol/manifest.js'
import { AgentMetrics } from '../../protocol/agent-metrics.js'
import { ECHO_AGENT_ID, errorResponse } from '../../protocol/openapi.js'

const AgentIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256, description: 'The agent\'s `metadata.id` (any case) or `metadata.name`', examples: [ECHO_AGENT_ID] }) })
const agentNotFound = errorResponse('No agent has this id or name', new AH_ERR_AGENT_NOT_FOUND('nobody'))

/** `GET /v1/agents`, `GET /v1/agents/:id` (the served manifests, CAP.md §7) and `GET /v1/agents/:id/metrics`. */
const agentRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const hostedAgent = (id: string): HostedAgent => {
    const hosted = app.agents.get(id)
    if (hosted === undefined) throw new AH_ERR_AGENT_NOT_FOUND(id)
    return hosted
  }
  app.get('/v1/agents', {
    schema: {
      operationId: 'listAgents',
      tags: ['agents'],
      summary: 'List hosted agents',
      description: 'Every hosted agent\'s manifest (CAP.md §7); `metadata.id` is what `POST /v1/assist` takes as `context.agent_id`.',
      response: { 200: AgentList }
    }
  }, async () => ({ agents: app.agents.list().map((h) => h.manifest) }))

  app.get('/v1/agents/:id', {
    schema: {
      operationId: 'getAgent',
      tags: ['agents'],
      summary: 'One agent\'s manifest, by id (uuid) or name',
      params: AgentIdParams,
      response: { 200: AgentDefinition, 404: agentNotFound }
    }
  }, async (request) => {
    const hosted = hostedAgent(request.params.id)
    return hosted.manifest
  })

  app.get('/v1/agents/:id/metrics', {
    schema: {
      operationId: 'getAgentMetrics',
      tags: ['agents'],
      summary: 'One agent\'s calls, failures and latency in this server process',
      description: 'Runs since the process started (`calls`, `failures`: runs that ended `aborted`, by an error of the agent\'s; `by_end`), and p50/p95/p99 latency of the runs that ended in the last ten minutes. The same figures are in `/metrics` (`agent_host_assist_runs_total`, `agent_host_agent_latency_seconds`), per process.',
      params: AgentIdParams,
      response: { 200: AgentMetrics, 404: agentNotFound }
    }
  }, async (request) => {
    const hosted = hostedAgent(request.params.id)
    const name = hosted.manifest.metadata.name
    const byEnd: Record<string, number> = {}
    for (const { labels, value } of (await app.metrics.runs.get()).values) {
      if (labels.agent === name) byEnd[String(labels.end)] = (byEnd[String(labels.end)] ?? 0) + value
    }
    // a summary's values carry a `quantile` label besides the declared ones (and _sum/_count rows without it)
    const quantiles = new Map((await app.metrics.agentLatency.get()).values
      .map((v) => ({ ...v, labels: v.labels as { agent?: string, quantile?: number } }))
      .filter((v) => v.labels.agent === name && v.labels.quantile !== undefined).map((v) => [Number(v.labels.quantile), v.value]))
    const ms = (q: number): number => Math.round((quantiles.get(q) ?? 0) * 1e6) / 1e3
    return {
      agent_id: hosted.manifest.metadata.id,
      name,
      calls: Object.values(byEnd).reduce((a, b) => a + b, 0),
      failures: byEnd.aborted ?? 0,
      by_end: byEnd,
      latency_ms: quantiles.size === 0 || Number.isNaN(quantiles.get(0.5)) ? null : { p50: ms(0.5), p95: ms(0.95), p99: ms(0.99) },
      window_seconds: 600
    }
  })
}

export default agentRoutes
