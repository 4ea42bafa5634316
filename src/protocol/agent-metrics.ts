import { Type, type Static } from 'typebox'

const Quantiles = Type.Object({
  p50: Type.Number({ minimum: 0 }),
  p95: Type.Number({ minimum: 0 }),
  p99: Type.Number({ minimum: 0 })
}, { additionalProperties: false })

/** `GET /v1/agents/:id/metrics`: how one agent has been doing in this server process. */
export const AgentMetrics = Type.Object({
  agent_id: Type.String(),
  name: Type.String(),
  /** Runs since this process started. */
  calls: Type.Integer({ minimum: 0 }),
  /** Runs that ended in an error of the agent's (failed, broke its contract, timed out, ...), not cancels or disconnects. */
  failures: Type.Integer({ minimum: 0 }),
  /** Runs by how they ended. */
  by_end: Type.Record(Type.String(), Type.Integer({ minimum: 0 })),
  /** Latency of the runs that ended in the last `window_seconds`, in ms; null without any. */
  latency_ms: Type.Union([Quantiles, Type.Null()]),
  window_seconds: Type.Integer({ minimum: 1 })
}, { additionalProperties: false, title: 'AgentMetrics' })
export type AgentMetrics = Static<typeof AgentMetrics>
