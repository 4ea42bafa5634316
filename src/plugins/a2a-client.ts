import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { loadA2AAgents } from '../a2a-client/agents-file.js'
import { RemoteAgents } from '../a2a-client/remote-agents.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The external A2A agents of A2A_AGENTS_FILE, which agents call through `host.a2a` (`src/a2a-client/`). */
    a2aAgents: RemoteAgents
  }
}

/**
 * The external A2A agents agents may call: A2A_AGENTS_FILE's entries (read and checked at boot: a
 * bad file stops it with `AH_ERR_CONFIG_INVALID`, one line per problem), their cards, and the record of every call in the event log and the audit log.
 * On close, calls still going are given up and their remote tasks cancelled.
 */
async function a2aClient (app: FastifyInstance): Promise<void> {
  const config = app.config
  const agents = new RemoteAgents({
    // ${PORT} in the file is the port this server listens on, set or not (a card URL of its own)
    agents: loadA2AAgents(config.A2A_AGENTS_FILE, { ...config.ENV, PORT: String(config.PORT) }),
    ledger: app.ledger,
    log: app.log
  })
  if (agents.names.length > 0) app.log.info({ a2aAgents: agents.names }, 'external A2A agents configured')
  app.decorate('a2aAgents', agents)
  app.addHook('onClose', async () => { await agents.close() })
}

export default fp(a2aClient, { name: 'a2a-client', fastify: '5.x', dependencies: ['config', 'storage'] })
