import { join } from 'node:path'
import { BUNDLED_AGENTS_DIR, parseCommand, parsePrices, type Config } from '../config.js'
import { AH_ERR_BACKEND_UNAVAILABLE } from '../errors.js'
import { AnthropicTransport } from './llm/anthropic.js'
import { LlmProtocol } from './llm/llm-protocol.js'
import { OpenAiTransport } from './llm/openai.js'
import { LocalAgentProtocol } from './local/local-agent-protocol.js'
import type { AgentHost, AgentProtocol, ProtocolLog, SessionUsage, TransportType } from './protocol.js'

/** One backend as `GET /v1/backends` shows it. */
export interface BackendInfo {
  name: string
  /** Other names it answers to (`llm` for the LLM_PROVIDER one). */
  aliases: string[]
  transport: TransportType
  available: boolean
  /** When not available: what to set. */
  reason?: string
  /** Provider and model (LLM backends). */
  provider?: string
  model?: string
  /** Usage over the sessions this process holds (LLM backends). */
  usage?: SessionUsage & { sessions: number }
}

/**
 * Backends no configuration makes: a protocol binding lends them to the runs it starts
 * (`PrepareOptions.lend`). Elsewhere their name is refused with the reason here.
 */
export const LENT_BACKENDS: ReadonlyMap<string, string> = new Map([
  ['mcp-sampling', 'mcp-sampling is the calling MCP client\'s model: a run has it only when an MCP tools/call starts it, from a client that declared the `sampling` capability, and not as a task (a task\'s run has no call stream to ask on)']
])

/** The demo CLI `cli-agent` runs when CLI_AGENT_COMMAND is empty. */
export const DEMO_CLI = join(BUNDLED_AGENTS_DIR, 'cli-agent', 'demo-cli.mjs')

/**
 * The configured backends by name. It is the `host` agents receive: `host.backend('llm')`.
 * Names: `openai`, `anthropic`, `local`, and the alias `llm` for the LLM_PROVIDER one.
 */
export class BackendRegistry implements AgentHost {
  readonly #protocols = new Map<string, AgentProtocol>()
  readonly #aliases = new Map<string, string>()

  /** Register `protocol` under its name (and `aliases`). */
  add (protocol: AgentProtocol, aliases: string[] = []): void {
    this.#protocols.set(protocol.name, protocol)
    for (const alias of aliases) this.#aliases.set(alias, protocol.name)
  }

  /** The backend named (or aliased) `name`, if there is one. */
  get (name: string): AgentProtocol | undefined {
    return this.#protocols.get(this.#aliases.get(name) ?? name)
  }

  backend (name: string): AgentProtocol {
    const protocol = this.get(name)
    if (protocol === undefined) throw new AH_ERR_BACKEND_UNAVAILABLE(LENT_BACKENDS.get(name) ?? `no backend is named "${name}" (known: ${this.names().join(', ')})`)
    return protocol
  }

  /** Every name and alias. */
  names (): string[] {
    return [...this.#protocols.keys(), ...this.#aliases.keys()]
  }

  /**
   * Check that each backend in `names` exists and is available.
   * @throws AH_ERR_BACKEND_UNAVAILABLE naming what to set
   */
  async require (names: readonly string[]): Promise<void> {
    for (const name of names) {
      const protocol = this.backend(name)
      if (!await protocol.available()) throw new AH_ERR_BACKEND_UNAVAILABLE(protocol.unavailableReason())
    }
  }

  async describe (): Promise<BackendInfo[]> {
    return await Promise.all([...this.#protocols.values()].map(async (p) => {
      const available = await p.available()
      const info: BackendInfo = {
        name: p.name,
        aliases: [...this.#aliases].filter(([, target]) => target === p.name).map(([alias]) => alias),
        transport: p.transportType(),
        available
      }
      if (!available) info.reason = p.unavailableReason()
      if (p instanceof LlmProtocol) {
        info.provider = p.transport.provider
        info.model = p.transport.model
        info.usage = p.totalUsage()
      }
      return info
    }))
  }

  /** Stop every session (local agents' processes). */
  async close (): Promise<void> {
    await Promise.all([...this.#protocols.values()].map(async (p) => {
      if (p instanceof LocalAgentProtocol) await p.close()
    }))
  }
}

/** The backends the configuration describes. */
export function createBackends (config: Config, log: ProtocolLog): BackendRegistry {
  const registry = new BackendRegistry()
  const common = { maxTokens: config.LLM_MAX_TOKENS, maxRetries: config.LLM_MAX_RETRIES, timeoutMs: config.LLM_TIMEOUT_MS }
  const llm = { prices: parsePrices(config.LLM_PRICES), timeoutMs: config.LLM_TIMEOUT_MS, maxTurns: config.LLM_MAX_TURNS }
  registry.add(new LlmProtocol({
    ...llm,
    name: 'openai',
    transport: new OpenAiTransport({ ...common, baseUrl: config.OPENAI_BASE_URL, apiKey: config.OPENAI_API_KEY, model: config.OPENAI_MODEL })
  }), config.LLM_PROVIDER === 'openai' ? ['llm'] : [])
  registry.add(new LlmProtocol({
    ...llm,
    name: 'anthropic',
    transport: new AnthropicTransport({ ...common, baseUrl: config.ANTHROPIC_BASE_URL, apiKey: config.ANTHROPIC_API_KEY, model: config.ANTHROPIC_MODEL })
  }), config.LLM_PROVIDER === 'anthropic' ? ['llm'] : [])
  const command = parseCommand(config.CLI_AGENT_COMMAND)
  registry.add(new LocalAgentProtocol({
    name: 'local',
    command: command.length > 0 ? command : [process.execPath, DEMO_CLI],
    dataDir: config.DATA_DIR,
    workspace: config.CLI_AGENT_WORKSPACE,
    inactivityTimeoutMs: config.CLI_AGENT_TIMEOUT_MS,
    env: config.SUBPROCESS_ENV,
    log
  }))
  return registry
}
