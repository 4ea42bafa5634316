import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { SUBPROCESS_ENV_ALWAYS } from '../config.js'
import { loadToolServers } from '../tools/servers-file.js'
import { McpToolRegistry } from '../tools/tool-registry.js'
import pkg from '../../package.json' with { type: 'json' }

declare module 'fastify' {
  interface FastifyInstance {
    /** The MCP servers agents call as tools (`MCP_SERVERS_FILE`); runs get them as `host.tools`. */
    tools: McpToolRegistry
  }
}

/**
 * The MCP tools of `MCP_SERVERS_FILE` (read and checked at boot, its `${NAME}` references resolved
 * from the environment the settings came from; a bad file stops the boot), and the record
 * of every call in the event log and the audit log. Servers start on their first call, not here:
 * an unused server costs nothing, and one that is down does not stop the host. A stdio server's process gets SUBPROCESS_ENV_ALWAYS of the host's environment and the
 * variables its entry names, never the host's settings. On close, every server is stopped.
 */
async function tools (app: FastifyInstance): Promise<void> {
  const baseEnv = Object.fromEntries(SUBPROCESS_ENV_ALWAYS.flatMap((name) => {
    const value = app.config.SUBPROCESS_ENV[name]
    return value !== undefined ? [[name, value]] : []
  }))
  const registry = new McpToolRegistry(loadToolServers(app.config.MCP_SERVERS_FILE, app.config.ENV), {
    baseEnv,
    clientInfo: { name: 'agent-host', version: pkg.version },
    log: app.log.child({ component: 'tools' }),
    stores: { ledger: app.ledger }
  })
  app.decorate('tools', registry)
  if (registry.names().length > 0) app.log.info({ tools: registry.names() }, 'MCP tools registered (each server starts on its first call)')
  app.addHook('onClose', async () => { await registry.close() })
}

export default fp(tools, { name: 'tools', fastify: '5.x', dependencies: ['config', 'storage'] })
