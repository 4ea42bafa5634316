import { A2A_PROTOCOL_VERSION, type AgentCard, type AgentInterface, type AgentSkill, type SecurityRequirement, type SecurityScheme } from '@a2a-js/sdk'
import type { HostedAgent } from '../agents/hosted-agent.js'

/** How callers authenticate (the server's `AUTH_MODE`). */
export type AuthMode = 'off' | 'apikey' | 'jwt'

/** The media types every hosted agent takes and gives over A2A: text parts and JSON data parts. */
const MODES = ['text/plain', 'application/json']

/** Where an agent's A2A bindings are, under the server's origin. */
export function a2aPaths (agentId: string): { card: string, jsonRpc: string, rest: string } {
  return { card: `/a2a/${agentId}/.well-known/agent-card.json`, jsonRpc: `/a2a/${agentId}`, rest: `/a2a/${agentId}/rest` }
}

/** The scheme a bearer credential of this server is (none with auth off). */
function security (auth: AuthMode): { schemes: Record<string, SecurityScheme>, requirements: SecurityRequirement[] } {
  if (auth === 'off') return { schemes: {}, requirements: [] }
  const description = auth === 'apikey'
    ? 'An API key of this server (agent-host keys create) with the assist:invoke scope, as a bearer token'
    : 'A JWT from the configured issuer, for the configured audience, with the assist:invoke scope'
  return {
    schemes: { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { scheme: 'Bearer', bearerFormat: auth === 'jwt' ? 'JWT' : '', description } } } },
    requirements: [{ schemes: { bearer: { list: ['assist:invoke'] } } }]
  }
}

/** The agent's capabilities as A2A skills (a skill's id is the capability's name, as `metadata.capability` takes it). */
function skills (hosted: HostedAgent): AgentSkill[] {
  return hosted.capabilities.map(({ capability }) => ({
    id: capability.name,
    name: capability.name,
    description: capability.description,
    tags: [capability.type, capability.delivery_mode ?? 'request_response'],
    examples: [],
    inputModes: MODES,
    outputModes: MODES,
    securityRequirements: []
  }))
}

/**
 * The A2A agent card of one hosted agent, for a server reached at `origin` (`http://host:port`):
 * its name, version and skills (its capabilities), streaming, the security scheme of `auth`, and
 * its JSON-RPC and HTTP+JSON interfaces (protocol version 1.0).
 */
export function agentCard (hosted: HostedAgent, origin: string, auth: AuthMode): AgentCard {
  const { id, name, version, author } = hosted.manifest.metadata
  const paths = a2aPaths(id)
  const interfaces: AgentInterface[] = [
    { url: `${origin}${paths.jsonRpc}`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION },
    { url: `${origin}${paths.rest}`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }
  ]
  const { schemes, requirements } = security(auth)
  return {
    name,
    description: hosted.capabilities.map(({ capability }) => capability.description).join(' ') || name,
    supportedInterfaces: interfaces,
    provider: { organization: author, url: origin },
    version,
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: schemes,
    securityRequirements: requirements,
    defaultInputModes: MODES,
    defaultOutputModes: MODES,
    skills: skills(hosted),
    signatures: []
  }
}

/** The extension of the host's card that lists its agents' cards. */
export const AGENT_DIRECTORY_EXTENSION = 'urn:agent-host:a2a:agent-directory:v1'

/**
 * The host's own card (`/.well-known/agent-card.json`): a directory of the hosted agents. Each
 * agent is a skill (its id the agent's id) whose description names its card, and the extension
 * {@link AGENT_DIRECTORY_EXTENSION} lists the cards' URLs for a program. The host itself takes no
 * messages: its interfaces are its agents', each at its own URL.
 */
export function hostCard (agents: readonly HostedAgent[], origin: string, auth: AuthMode, version: string): AgentCard {
  const { schemes, requirements } = security(auth)
  const listed = agents.map((hosted) => ({ hosted, card: `${origin}${a2aPaths(hosted.manifest.metadata.id).card}` }))
  return {
    name: 'agent-host',
    description: `${agents.length} hosted agent${agents.length === 1 ? '' : 's'}, each an A2A agent of its own: fetch its card to call it.`,
    supportedInterfaces: [],
    provider: { organization: 'agent-host', url: origin },
    version,
    capabilities: {
      streaming: true,
      pushNotifications: false,
      extensions: [{
        uri: AGENT_DIRECTORY_EXTENSION,
        description: 'The hosted agents and their agent cards',
        required: false,
        params: { agents: listed.map(({ hosted, card }) => ({ id: hosted.manifest.metadata.id, name: hosted.manifest.metadata.name, card })) }
      }],
      extendedAgentCard: false
    },
    securitySchemes: schemes,
    securityRequirements: requirements,
    defaultInputModes: MODES,
    defaultOutputModes: MODES,
    skills: listed.map(({ hosted, card }) => ({
      id: hosted.manifest.metadata.id,
      name: hosted.manifest.metadata.name,
      description: `${hosted.capabilities.map(({ capability }) => capability.description).join(' ')} Agent card: ${card}`,
      tags: ['agent', ...hosted.capabilities.map(({ capability }) => capability.name)],
      examples: [],
      inputModes: MODES,
      outputModes: MODES,
      securityRequirements: []
    })),
    signatures: []
  }
}
