import { Counter, Gauge, Histogram, Registry, Summary, collectDefaultMetrics } from 'prom-client'
import type { RunObserver } from './assist/run-observers.js'
import { AH_ERR_TASK_STALE_CLAIM, ERROR_CATALOGUE, STREAM_ERROR_CODES } from './errors.js'
import type { TaskStore } from './storage/tasks/task-store.js'
import { TASK_STATUSES } from './storage/tasks/task.js'
import { DEFAULT_TENANT } from './storage/tenants.js'

/** What an SSE response reports about itself (see `SseWriter`'s `metrics` option). */
export interface SseMetrics {
  opened(): void
  closed(): void
  /** `count` packets were written (default 1). */
  packet(count?: number): void
  heartbeat(): void
  gone(why: 'client_disconnected' | 'slow_consumer'): void
}

/** What every metric's name starts with, prom-client's default process metrics' too. */
export const METRIC_PREFIX = 'agent_host_'
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]
const HTTP_ERROR_CODES: ReadonlySet<string> = new Set(ERROR_CATALOGUE.map((e) => e.code))
/**
 * Distinct `model` label values kept; later models are counted as `other`. Agents choose the model
 * (`start({ model })`), and one that passed its caller's choice through must not grow the series without bound.
 */
export const MAX_MODELS = 32

/**
 * The server's Prometheus metrics, in a registry of its own (so two apps in one process do not
 * share counters). Names start `agent_host_`; `GET /metrics` serves them as Prometheus text.
 */
export class HostMetrics {
  readonly registry = new Registry()
  readonly requests = new Counter({ name: `${METRIC_PREFIX}http_requests_total`, help: 'HTTP requests by route, method and status', labelNames: ['route', 'method', 'status'], registers: [this.registry] })
  readonly assistDuration = new Histogram({
    name: `${METRIC_PREFIX}assist_duration_seconds`,
    help: 'Time from the start of a /v1/assist run to its end, by agent and delivery mode',
    labelNames: ['agent', 'mode'],
    buckets: DURATION_BUCKETS,
    registers: [this.registry]
  })

  readonly firstPacket = new Histogram({
    name: `${METRIC_PREFIX}assist_first_packet_seconds`,
    help: 'Time from the start of a /v1/assist run to its first packet journaled and handed to its clients, by agent and delivery mode',
    labelNames: ['agent', 'mode'],
    buckets: DURATION_BUCKETS,
    registers: [this.registry]
  })

  readonly tokens = new Counter({ name: `${METRIC_PREFIX}tokens_total`, help: 'Tokens used by /v1/assist runs, by tenant (of the caller), agent, model and direction (input, output); model "unknown" when the agent reported them itself or its backend names none', labelNames: ['tenant', 'agent', 'model', 'direction'], registers: [this.registry] })
  readonly cost = new Counter({ name: `${METRIC_PREFIX}cost_usd_total`, help: 'Cost of the tokens of /v1/assist runs in US dollars (LLM_PRICES, or as the agent reported it), by tenant (of the caller), agent and model', labelNames: ['tenant', 'agent', 'model'], registers: [this.registry] })
  readonly errors = new Counter({ name: `${METRIC_PREFIX}errors_total`, help: 'Errors by code: AH_ERR_* answers over HTTP (source http) and runs that ended with an ERROR packet, by its stream error code (source run)', labelNames: ['code', 'source'], registers: [this.registry] })

  readonly runs = new Counter({ name: `${METRIC_PREFIX}assist_runs_total`, help: 'Runs of /v1/assist by agent, mode and how they ended', labelNames: ['agent', 'mode', 'end'], registers: [this.registry] })
  /** Per agent, over the last ten minutes: what `GET /v1/agents/:id/metrics` reports as p50/p95/p99. */
  readonly agentLatency = new Summary({
    name: `${METRIC_PREFIX}agent_latency_seconds`,
    help: 'Run latency by agent over a sliding ten minutes (quantiles 0.5, 0.95, 0.99)',
    labelNames: ['agent'],
    percentiles: [0.5, 0.95, 0.99],
    maxAgeSeconds: 600,
    ageBuckets: 5,
    registers: [this.registry]
  })

  readonly openStreams = new Gauge({ name: `${METRIC_PREFIX}sse_open_streams`, help: 'SSE responses open now', registers: [this.registry] })
  readonly packets = new Counter({ name: `${METRIC_PREFIX}sse_packets_sent_total`, help: 'SSE events written to clients', registers: [this.registry] })
  readonly heartbeats = new Counter({ name: `${METRIC_PREFIX}sse_heartbeats_total`, help: 'SSE heartbeat comments written', registers: [this.registry] })
  readonly disconnects = new Counter({ name: `${METRIC_PREFIX}sse_disconnects_total`, help: 'SSE clients gone before their response ended, by why', labelNames: ['why'], registers: [this.registry] })
  readonly claims = new Counter({ name: `${METRIC_PREFIX}task_claims_total`, help: 'Tasks claimed (first attempts)', registers: [this.registry] })
  readonly reclaims = new Counter({ name: `${METRIC_PREFIX}task_reclaims_total`, help: 'Tasks claimed again after a failure or an expired lease', registers: [this.registry] })
  readonly staleCompletions = new Counter({ name: `${METRIC_PREFIX}task_stale_completions_total`, help: 'Heartbeats, completions and failures refused because the claim had moved on', labelNames: ['operation'], registers: [this.registry] })
  readonly overloads = new Counter({ name: `${METRIC_PREFIX}overloaded_total`, help: 'Requests refused with 503 AH_ERR_OVERLOADED, by the limit passed', labelNames: ['type'], registers: [this.registry] })
  readonly rateLimited = new Counter({ name: `${METRIC_PREFIX}rate_limited_total`, help: 'Requests refused by a limit: caller, agent or auth_failures (429 AH_ERR_RATE_LIMITED), caller_streams or total_streams (AH_ERR_TOO_MANY_STREAMS)', labelNames: ['limit'], registers: [this.registry] })
  readonly busPublished = new Counter({ name: `${METRIC_PREFIX}bus_events_published_total`, help: 'Publications to the event bus: stored, or duplicates of a live event with the same key', labelNames: ['duplicate'], registers: [this.registry] })
  readonly busDeliveries = new Counter({ name: `${METRIC_PREFIX}bus_deliveries_total`, help: 'Event bus deliveries this process handled, by outcome: handled, retried, dead_lettered, expired (dropped unhandled past the TTL)', labelNames: ['outcome'], registers: [this.registry] })
  readonly leaseExpiries = new Counter({ name: `${METRIC_PREFIX}task_lease_expiries_total`, help: 'Claims whose lease expired (found by the reaper)', registers: [this.registry] })

  readonly #models = new Set<string>()

  /** The run engine's side (`AssistEngine.observe`): time to first packet, tokens and cost, errors runs ended with. */
  readonly runObserver: RunObserver = {
    firstPacket: ({ agent, mode, seconds }) => { this.firstPacket.observe({ agent, mode }, seconds) },
    usage: ({ agent, tenant = DEFAULT_TENANT, model, input, output, cost }) => {
      const label = this.#model(model)
      this.tokens.inc({ tenant, agent, model: label, direction: 'input' }, input)
      this.tokens.inc({ tenant, agent, model: label, direction: 'output' }, output)
      if (cost !== undefined) this.cost.inc({ tenant, agent, model: label }, cost)
    },
    failed: ({ code }) => {
      if (Object.hasOwn(STREAM_ERROR_CODES, code)) this.errors.inc({ code, source: 'run' })
    }
  }

  /** An answer over HTTP carried the error `code`: counted when it is one of the catalogue's, so that no label comes from elsewhere. */
  httpError (code: unknown): void {
    if (typeof code === 'string' && HTTP_ERROR_CODES.has(code)) this.errors.inc({ code, source: 'http' })
  }

  #model (model: string): string {
    if (this.#models.has(model)) return model
    if (this.#models.size >= MAX_MODELS) return 'other'
    this.#models.add(model)
    return model
  }

  /** The SSE side, for `SseWriter`. */
  readonly sse: SseMetrics = {
    opened: () => { this.openStreams.inc() },
    closed: () => { this.openStreams.dec() },
    packet: (count = 1) => { this.packets.inc(count) },
    heartbeat: () => { this.heartbeats.inc() },
    gone: (why) => { this.disconnects.inc({ why }) }
  }

  /**
   * @param sources read at each scrape: the task graph (tasks by status) and the audit log's size
   */
  constructor (sources: { tasks: () => TaskStore, auditRows: () => number | Promise<number> }) {
    collectDefaultMetrics({ register: this.registry, prefix: METRIC_PREFIX })
    const registry = this.registry
    new Gauge({ // eslint-disable-line no-new
      name: `${METRIC_PREFIX}tasks`,
      help: 'Tasks in the graph by status',
      labelNames: ['status'],
      registers: [registry],
      async collect () {
        const counts = new Map<string, number>(TASK_STATUSES.map((s) => [s, 0]))
        for (const task of await sources.tasks().list({ limit: Number.MAX_SAFE_INTEGER })) counts.set(task.status, (counts.get(task.status) ?? 0) + 1)
        for (const [status, n] of counts) this.set({ status }, n)
      }
    })
    new Gauge({ // eslint-disable-line no-new
      name: `${METRIC_PREFIX}audit_rows`,
      help: 'Rows in the audit log',
      registers: [registry],
      async collect () { this.set(await sources.auditRows()) }
    })
  }

  /**
   * `store` with its claims, reclaims, stale completions and lease expiries counted. The store's
   * behaviour is unchanged; only results and StaleClaimErrors are observed.
   */
  instrument (store: TaskStore): TaskStore {
    const stale = async <T>(operation: string, run: () => Promise<T>): Promise<T> => {
      try {
        return await run()
      } catch (err) {
        if (err instanceof AH_ERR_TASK_STALE_CLAIM) this.staleCompletions.inc({ operation })
        throw err
      }
    }
    return new Proxy(store, {
      get: (target, key, receiver) => {
        const value = Reflect.get(target, key, receiver) as unknown
        if (typeof value !== 'function') return value
        const method = value.bind(target) as (...args: unknown[]) => Promise<unknown>
        switch (key) {
          case 'claim':
            return async (...args: unknown[]) => {
              const task = await method(...args) as { attempt: number } | undefined
              if (task !== undefined) (task.attempt > 1 ? this.reclaims : this.claims).inc()
              return task
            }
          case 'reap':
            return async (...args: unknown[]) => {
              const reaped = await method(...args) as unknown[]
              this.leaseExpiries.inc(reaped.length)
              return reaped
            }
          case 'heartbeat': case 'complete': case 'fail':
            return async (...args: unknown[]) => await stale(key, async () => await method(...args))
          default:
            return method
        }
      }
    })
  }
}
