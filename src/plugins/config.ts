import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { Config } from '../config.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The validated configuration this app was built with. */
    config: Config
    /** This instance's id (`/health` `agent_id`): INSTANCE_ID, or a new UUID per boot. */
    instanceId: string
  }
}

/** Makes the configuration available to every plugin. */
async function config (app: FastifyInstance, options: { config: Config }): Promise<void> {
  app.decorate('config', options.config)
  app.decorate('instanceId', options.config.INSTANCE_ID === '' ? randomUUID() : options.config.INSTANCE_ID.toLowerCase())
}

export default fp(config, { name: 'config', fastify: '5.x' })
