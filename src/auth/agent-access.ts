import { AH_ERR_AUTH_REQUIRED, AH_ERR_FORBIDDEN } from '../errors.js'
import type { Identity } from '../storage/api-keys.js'

/**
 * Whether a principal limited to `agents` (names or manifest ids; null: any agent) may have `agent`
 * work for it. An agent that is only a task agent has no manifest id: its name is its task type.
 */
export function mayInvoke (agents: ReadonlySet<string> | null, agent: { id?: string, name: string }): boolean {
  return agents === null || agents.has(agent.name) || (agent.id !== undefined && agents.has(agent.id))
}

/**
 * Why `who` may not invoke `agent`, if it may not: the agent requires authentication and AUTH_MODE
 * is off (401), or the caller's key or token is limited to other agents (403). The caller audits it.
 */
export function agentRefusal (who: Identity, agent: { id: string, name: string, requiresAuth: boolean }): { error: Error, reason: 'requires_auth' | 'agent' } | undefined {
  if (agent.requiresAuth && who.anonymous) return { error: new AH_ERR_AUTH_REQUIRED(`agent "${agent.name}" requires authentication, and AUTH_MODE is off`), reason: 'requires_auth' }
  if (!mayInvoke(who.agents, agent)) return { error: new AH_ERR_FORBIDDEN(`this key may not invoke agent "${agent.name}"`), reason: 'agent' }
  return undefined
}
