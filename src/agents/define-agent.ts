import type { AgentCapability, AgentDefinition } from '../protocol/manifest.js'
import type { Agent, AgentSpec, CapabilitySpec, ManifestSpec } from './contract.js'

const ANY_OBJECT = { type: 'object' }

function fillCapability (cap: CapabilitySpec): AgentCapability {
  const deliveryMode = cap.delivery_mode ?? 'request_response'
  const filled: AgentCapability = {
    ...cap,
    type: cap.type ?? (deliveryMode === 'server_sent_events' ? 'streaming' : 'atomic'),
    delivery_mode: deliveryMode,
    events: cap.events ?? [],
    injected_params: cap.injected_params ?? []
  }
  if (cap.interface_id === undefined) {
    filled.inputs = cap.inputs ?? ANY_OBJECT
    filled.outputs = cap.outputs ?? ANY_OBJECT
  }
  return filled
}

/**
 * Fill what an author left out of a manifest (CAP.md §7): capability defaults (`inputs`/`outputs`
 * `{"type":"object"}`, `request_response`, empty `events`/`injected_params`), `model_config`
 * `{ model: "none", temperature: 0 }`, empty nodes/edges/tools/libraries, `status: "draft"`.
 * Idempotent: a complete manifest comes back equal.
 */
export function fillManifest (spec: ManifestSpec): AgentDefinition {
  const { metadata, capabilities, config, dependencies, ...rest } = spec
  return {
    ...rest,
    metadata: { requires_auth: false, ...metadata } as AgentDefinition['metadata'],
    capabilities: (capabilities ?? [{ name: 'assist', description: `Ask ${metadata.name}` }]).map(fillCapability),
    config: {
      ...config,
      nodes: config?.nodes ?? [],
      edges: config?.edges ?? [],
      model_config: config?.model_config ?? { model: 'none', temperature: 0 }
    },
    dependencies: { tools: dependencies?.tools ?? [], libraries: dependencies?.libraries ?? [] },
    status: spec.status ?? 'draft'
  }
}

/**
 * Author an agent with types and defaults. The result is what an agent folder default-exports:
 *
 * ```ts
 * export default defineAgent({
 *   manifest: { metadata: { id, name: 'echo', version: '1.0.0', author: 'me', created_at }, capabilities: [...] },
 *   async assist (request, session, response) { await response.result({ echo: request.payload.query }) }
 * })
 * ```
 */
export function defineAgent (spec: AgentSpec): Agent {
  const agent: Agent = { ...spec, manifest: fillManifest(spec.manifest) }
  return agent
}
