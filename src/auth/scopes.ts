import type { Viewer } from '../storage/tenants.js'

/**
 * Every scope a key may hold. `admin` (the host's administrator) holds them all and sees every
 * tenant's things; `tenant-admin` holds every scope but `admin` and sees its own tenant's things.
 */
export const SCOPES = [
  'assist:invoke', 'agents:read', 'tasks:read', 'tasks:write', 'tasks:claim', 'events:internal',
  'sessions:read', 'sessions:delete', 'audit:read', 'bus:publish', 'bus:read', 'tenant-admin', 'admin'
] as const
export type Scope = typeof SCOPES[number]

/** Routes anyone may call: liveness, the API's own description, and the A2A agent cards (discovery is public in A2A). */
export const PUBLIC_ROUTES = new Set(['GET /', 'GET /health', 'GET /openapi.json', 'GET /.well-known/agent-card.json', 'GET /a2a/:agent_id/.well-known/agent-card.json', 'GET /docs', 'GET /docs/', 'GET /docs/*', 'GET /docs/json', 'GET /docs/yaml', 'GET /docs/static/*', 'HEAD /health', 'GET /.well-known/oauth-protected-resource', 'GET /.well-known/oauth-protected-resource/mcp'])

/**
 * The scope each route needs, by `METHOD /route/pattern`. Every route the server registers is
 * either here or in {@link PUBLIC_ROUTES}; the auth plugin refuses to boot otherwise, so a new
 * route cannot be left open by accident.
 */
export const ROUTE_SCOPES: Readonly<Record<string, Scope>> = {
  'POST /v1/assist': 'assist:invoke',
  'POST /assist': 'assist:invoke',
  'POST /v1/assist/:request_id/cancel': 'assist:invoke',
  'POST /mcp': 'assist:invoke',
  'GET /mcp': 'assist:invoke',
  'DELETE /mcp': 'assist:invoke',
  'GET /v1/agents': 'agents:read',
  'GET /v1/agents/:id': 'agents:read',
  'GET /v1/agents/:id/metrics': 'agents:read',
  'GET /v1/backends': 'agents:read',
  'GET /v1/tools': 'agents:read',
  'GET /v1/usage': 'tenant-admin',
  'GET /v1/sessions/:session_id/history': 'sessions:read',
  'DELETE /v1/sessions/:session_id': 'sessions:delete',
  'GET /v1/events': 'events:internal',
  'GET /v1/audit': 'audit:read',
  'GET /v1/audit/verify': 'audit:read',
  'GET /v1/audit/checkpoint': 'audit:read',
  'POST /v1/tasks': 'tasks:write',
  'POST /v1/plans': 'tasks:write',
  'GET /v1/plans/:id': 'tasks:read',
  'GET /v1/tasks': 'tasks:read',
  'GET /v1/tasks/:id': 'tasks:read',
  'POST /v1/tasks/:id/cancel': 'tasks:write',
  'POST /v1/tasks/:id/approvals/:approval_id': 'tasks:write',
  'GET /v1/tasks/:id/events': 'events:internal',
  'GET /v1/conversations/:id/events': 'tasks:read',
  'POST /v1/bus/events': 'bus:publish',
  'GET /v1/bus/events': 'bus:read',
  'GET /v1/bus/subscriptions': 'bus:read',
  'GET /v1/bus/dead-letters': 'bus:read',
  'POST /v1/bus/dead-letters/:id/retry': 'bus:publish',
  'POST /a2a/:agent_id': 'assist:invoke',
  'POST /a2a/:agent_id/rest/message::send': 'assist:invoke',
  'POST /a2a/:agent_id/rest/message::stream': 'assist:invoke',
  'GET /a2a/:agent_id/rest/tasks': 'assist:invoke',
  'GET /a2a/:agent_id/rest/tasks/:task': 'assist:invoke',
  'POST /a2a/:agent_id/rest/tasks/:task': 'assist:invoke',
  'GET /a2a/:agent_id/rest/tasks/:task/pushNotificationConfigs': 'assist:invoke',
  'POST /a2a/:agent_id/rest/tasks/:task/pushNotificationConfigs': 'assist:invoke',
  'GET /a2a/:agent_id/rest/tasks/:task/pushNotificationConfigs/:config': 'assist:invoke',
  'DELETE /a2a/:agent_id/rest/tasks/:task/pushNotificationConfigs/:config': 'assist:invoke',
  'GET /v1/a2a/push-deliveries': 'assist:invoke',
  'POST /ai-sdk/:agent_id/chat': 'assist:invoke',
  'GET /ai-sdk/:agent_id/chat/:chat_id/stream': 'assist:invoke',
  'POST /ai-sdk/:agent_id/chat/:chat_id/stop': 'assist:invoke',
  'POST /ag-ui/:agent_id': 'assist:invoke',
  'GET /metrics': 'admin'
}

/**
 * What `GET /v1/tools?start=true` needs besides the route's `agents:read`: it starts every MCP
 * server's process, an operator's act (a run starts only the servers its agent calls, on its first call).
 */
export const START_TOOLS_SCOPE: Scope = 'admin'

/**
 * Whose things a caller sees, by role: the host's `admin` everyone's, a `tenant-admin` its tenant's,
 * anyone else its own principal's. Anything else is, for this caller, not there (404, never 403).
 */
export function viewerOf (identity: { id: string, tenant: string, scopes: ReadonlySet<string> }): Viewer {
  if (identity.scopes.has('admin')) return { all: true }
  if (identity.scopes.has('tenant-admin')) return { tenant: identity.tenant }
  return { owner: identity.id }
}

/** Whether `held` grants `scope` (`admin` grants everything; `tenant-admin` everything but `admin`). */
export function grants (held: ReadonlySet<string>, scope: string): boolean {
  return held.has('admin') || held.has(scope) || (held.has('tenant-admin') && scope !== 'admin')
}

/** A route's key in {@link ROUTE_SCOPES}: `METHOD /pattern` (HEAD counts as GET). */
export function routeKey (method: string, url: string): string {
  return `${method === 'HEAD' ? 'GET' : method} ${url}`
}

/** Whether the route (method and pattern) is one anyone may call. */
export function isPublic (method: string, url: string): boolean {
  return PUBLIC_ROUTES.has(routeKey(method, url)) || url === '/docs' || url.startsWith('/docs/') || ((method === 'GET' || method === 'HEAD') && (url === '/playground' || url.startsWith('/playground/')))
}
