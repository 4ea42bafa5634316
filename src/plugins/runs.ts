import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { AssistEngine } from '../assist/engine.js'
import type { RunRegistry } from '../assist/run-registry.js'
import { AH_ERR_SHUTTING_DOWN } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The run engine: submit, follow, answer, cancel (`src/assist/`). */
    assist: AssistEngine
    /** Runs in flight in this process, and the shutdown switch. */
    runs: RunRegistry
  }
}

/**
 * The run engine, wired to storage, agents, backends, metrics and telemetry. Once closing, new requests get
 * 503 `AH_ERR_SHUTTING_DOWN`; open runs get their shutdown packets and agents their abort before
 * the server stops. Recovers runs whose owner's lease lapsed (at boot and on every heartbeat) and
 * prunes journals older than JOURNAL_RETENTION_MS.
 */
async function runs (app: FastifyInstance): Promise<void> {
  const config = app.config
  const engine = new AssistEngine({
    ledger: app.ledger,
    sessions: app.sessions,
    agents: app.agents,
    backends: app.backends,
    bus: app.bus,
    a2a: app.a2aAgents,
    tools: app.tools,
    interrupts: app.stores.interrupts,
    budgets: app.budgets,
    instanceId: app.instanceId,
    log: app.log,
    tracer: app.tracer,
    settings: {
      leaseMs: config.RUN_LEASE_MS,
      writeBudgetMs: config.DB_WRITE_BUDGET_MS,
      maxOutputBytes: config.RUN_MAX_OUTPUT_BYTES,
      runTimeoutMs: config.RUN_TIMEOUT_MS,
      disconnectPolicy: config.DISCONNECT_POLICY,
      followerMaxBytes: config.SSE_MAX_BUFFER_BYTES,
      interruptExpiresS: config.INTERRUPT_EXPIRES_S,
      auditRuns: config.AUDIT_RUNS
    },
    onRunEnded: ({ agent, mode, reason, seconds }) => {
      app.metrics.assistDuration.observe({ agent, mode }, seconds)
      app.metrics.agentLatency.observe({ agent }, seconds)
      app.metrics.runs.inc({ agent, mode, end: reason })
    }
  })
  // the engine's writes are most of what the writer commits: its commits are traced with its runs
  app.stores.trace(app.tracer)
  app.decorate('assist', engine)
  app.decorate('runs', engine.registry)

  const recovered = await engine.recoverExpired()
  if (recovered > 0) app.log.warn({ recovered }, 'recovered runs whose owner\'s lease lapsed')
  engine.start()
  const retention = config.JOURNAL_RETENTION_MS
  const prune = async (): Promise<void> => {
    try {
      const pruned = await app.ledger.prune(Date.now() - retention)
      if (pruned > 0) app.log.info({ pruned }, 'pruned expired run journals')
      const chains = await app.stores.interrupts.prune(Date.now() - retention)
      if (chains > 0) app.log.info({ pruned: chains }, 'pruned runs done waiting for an answer')
    } catch (err) {
      app.log.warn({ err }, 'pruning run journals failed; trying again later')
    }
  }
  await prune()
  const timer = setInterval(() => { prune().catch(() => {}) }, Math.min(Math.max(Math.floor(retention / 4), 1000), 3600_000)).unref()

  app.addHook('onRequest', async (request) => {
    if (engine.closing && request.url !== '/health') throw new AH_ERR_SHUTTING_DOWN()
  })
  app.addHook('preClose', async () => {
    clearInterval(timer)
    app.log.info({ runs: engine.registry.size }, 'draining runs')
    await engine.shutdown(config.CLOSE_GRACE_MS)
  })
}

export default fp(runs, { name: 'runs', fastify: '5.x', dependencies: ['config', 'storage', 'agents', 'backends', 'bus', 'metrics', 'telemetry', 'a2a-client', 'tools', 'budgets'] })
