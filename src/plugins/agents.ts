import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { AH_ERR_AGENT_STARTUP } from '../errors.js'
import { loadAgents, type LoadedTaskAgent } from '../agents/loader.js'
import type { AgentRegistry } from '../agents/registry.js'
import type { HostedAgent } from '../agents/hosted-agent.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The hosted agents, by manifest id or name. */
    agents: AgentRegistry
    /** The task agents (they work the task graph). */
    taskAgents: LoadedTaskAgent[]
  }
}

async function stopAll (app: FastifyInstance, started: HostedAgent[]): Promise<void> {
  for (const hosted of started.reverse()) {
    try {
      await hosted.agent.shutdown?.()
    } catch (err) {
      app.log.error({ err, agent: hosted.manifest.metadata.name }, 'agent shutdown() failed')
    }
  }
}

/**
 * Loads the agents of AGENTS_DIR, runs their `startup()` hooks (before the server listens) and
 * their `shutdown()` hooks when it closes. A broken agent stops the boot with its path.
 */
async function agents (app: FastifyInstance): Promise<void> {
  const { registry, taskAgents, skipped } = await loadAgents(app.config.AGENTS_DIR)
  for (const folder of skipped) app.log.warn({ folder }, 'folder has no index.js, index.mjs or index.ts: not an agent')
  const started: HostedAgent[] = []
  for (const hosted of registry.list()) {
    try {
      await hosted.agent.startup?.()
    } catch (err) {
      await stopAll(app, started)
      throw new AH_ERR_AGENT_STARTUP(hosted.manifest.metadata.name, (err as Error).message, { cause: err })
    }
    started.push(hosted)
  }
  app.log.info({ agents: registry.list().map((h) => h.manifest.metadata.name), taskAgents: taskAgents.map((t) => t.agent.agentType), dir: app.config.AGENTS_DIR }, 'agents loaded')
  app.decorate('agents', registry)
  app.decorate('taskAgents', taskAgents)
  app.addHook('onClose', async () => { await stopAll(app, started) })
}

export default fp(agents, { name: 'agents', fastify: '5.x', dependencies: ['config'] })
