import { AH_ERR_AUTH_REQUIRED, AH_ERR_FORBIDDEN } from '../errors.js'
import type { Identity } from './keys.js'

/**
 * Why `who` may not invoke `agent`, if it may not: the agent requires authentication and AUTH_MODE
 * is off (401), or the caller's key or token is limited to other agents (403). The caller audits it.
 */
export function agentRefusal (who: Identity, agent: { id: string, name: string, requiresAuth: boolean }): { error: Error, reason: 'requires_auth' | 'agent' } | undefined {
  if (agent.requiresAuth && who.anonymous) return { error: new AH_ERR_AUTH_REQUIRED(`agent "${agent.name}" requires authentication, and AUTH_MODE is off`), reason: 'requires_auth' }
  if (who.agents !== null && !who.agents.has(agent.id) && !who.agents.has(agent.name)) return { error: new AH_ERR_FORBIDDEN(`this key may not invoke agent "${agent.name}"`), reason: 'agent' }
  return undefined
}
