import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { MemorySessionStore, type SessionStore } from '../agents/session-store.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** Active memory for agent sessions. */
    sessions: SessionStore
  }
}

/** Opens the session store and closes it with the server. */
async function sessions (app: FastifyInstance): Promise<void> {
  const store = new MemorySessionStore()
  app.decorate('sessions', store)
  app.addHook('onClose', async () => { await store.close() })
}

export default fp(sessions, { name: 'sessions', fastify: '5.x' })
