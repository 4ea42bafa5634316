import type { Tool, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js'
import type { HostedAgent } from '../agents/hosted-agent.js'
import { agentRefusal } from '../auth/agent-access.js'
import type { Identity } from '../storage/api-keys.js'

/** What the MCP spec allows in a tool name (1 to 128 of these characters). */
const NAME_CHARACTER = /[^A-Za-z0-9_.-]/g
const MAX_NAME = 128

/** The `_meta` keys of a tool and of its results: this host's prefix. */
export const META_AGENT_ID = 'agent-host/agent_id'
export const META_CAPABILITY = 'agent-host/capability'

/** One hosted agent's capability, as an MCP tool. */
export interface AgentTool {
  /** The tool as `tools/list` shows it. */
  readonly tool: Tool
  readonly agent: { readonly id: string, readonly name: string, readonly requiresAuth: boolean }
  readonly capability: string
}

/** `name` with every character the spec does not allow replaced by `_`, cut to the spec's length. */
function toolName (name: string): string {
  return name.replace(NAME_CHARACTER, '_').slice(0, MAX_NAME)
}

/** A JSON Schema for MCP's `inputSchema`/`outputSchema`: an object schema at the root, as the spec requires. */
function objectSchema (schema: Record<string, unknown> | undefined): Tool['inputSchema'] {
  // a CAP payload (and a result) is always a JSON object: saying so at the root is true whatever else the schema says
  return { ...(schema ?? {}), type: 'object' }
}

/** Whether a capability's `outputs` says more than "an object" (the default), so it is worth declaring. */
function declaresOutput (outputs: Record<string, unknown> | undefined): outputs is Record<string, unknown> {
  return outputs !== undefined && outputs.type === 'object' && Object.keys(outputs).some((key) => key !== 'type')
}

const HINTS = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const

/**
 * The hints an agent's author declared in `custom_metadata.mcp.annotations` (booleans only): the host
 * cannot know whether an agent reads or writes, so it claims nothing an author did not.
 */
function declaredAnnotations (hosted: HostedAgent): Partial<ToolAnnotations> {
  const mcp = (hosted.manifest.custom_metadata as { mcp?: { annotations?: Record<string, unknown> } } | undefined)?.mcp
  const declared = mcp?.annotations ?? {}
  const out: Partial<ToolAnnotations> = {}
  for (const hint of HINTS) if (typeof declared[hint] === 'boolean') out[hint] = declared[hint]
  return out
}

/**
 * Every hosted agent as MCP tools: one tool per capability. An agent with one capability is the tool
 * named after the agent (`echo`); one with several has a tool per capability, `<agent>.<capability>`
 * (`refactor.add_docstrings`). Characters the spec does not allow in a name become `_`; a name that
 * still clashes with an earlier tool's falls back to the agent's id (`<uuid>` or `<uuid>.<capability>`).
 * The arguments of a tool are the CAP `payload` of its capability (its `inputs` schema).
 */
export class ToolCatalogue {
  readonly #tools = new Map<string, AgentTool>()

  constructor (agents: readonly HostedAgent[]) {
    for (const hosted of agents) {
      const { metadata, capabilities } = hosted.manifest
      const single = capabilities.length === 1
      const annotations = declaredAnnotations(hosted)
      for (const capability of capabilities) {
        let name = toolName(single ? metadata.name : `${metadata.name}.${capability.name}`)
        if (this.#tools.has(name)) name = toolName(single ? metadata.id : `${metadata.id}.${capability.name}`)
        const title = single ? metadata.name : `${metadata.name}: ${capability.name}`
        const tool: Tool = {
          name,
          title,
          description: capability.description === '' ? title : capability.description,
          inputSchema: objectSchema(capability.inputs),
          ...(declaresOutput(capability.outputs) ? { outputSchema: objectSchema(capability.outputs) } : {}),
          annotations: { title, ...annotations },
          // any tool may run as a task (src/mcp/tasks.ts): its run goes on without the call's HTTP exchange
          execution: { taskSupport: 'optional' },
          _meta: { [META_AGENT_ID]: metadata.id, [META_CAPABILITY]: capability.name }
        }
        this.#tools.set(name, { tool, agent: { id: metadata.id, name: metadata.name, requiresAuth: metadata.requires_auth }, capability: capability.name })
      }
    }
  }

  /** The tools `who` may call, in the agents' order: an agent the caller may not invoke is not listed. */
  list (who: Identity): Tool[] {
    return [...this.#tools.values()].filter((entry) => agentRefusal(who, entry.agent) === undefined).map((entry) => entry.tool)
  }

  /** The ids of the agents `who` may call (those whose tools {@link list} shows). */
  agentIds (who: Identity): string[] {
    return [...new Set([...this.#tools.values()].filter((entry) => agentRefusal(who, entry.agent) === undefined).map((entry) => entry.agent.id))]
  }

  /** The tool of an agent's capability (a run's: its agent id and `metadata.capability`), if there is one and `who` may call it. */
  ofCapability (agentId: string, capability: string, who: Identity): AgentTool | undefined {
    for (const entry of this.#tools.values()) {
      if (entry.agent.id === agentId && entry.capability === capability) return agentRefusal(who, entry.agent) === undefined ? entry : undefined
    }
    return undefined
  }

  /** The tool named `name`, if there is one and `who` may call it. */
  find (name: string, who: Identity): AgentTool | undefined {
    const entry = this.#tools.get(name)
    return entry === undefined || agentRefusal(who, entry.agent) !== undefined ? undefined : entry
  }
}
