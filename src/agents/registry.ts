import type { HostedAgent } from './hosted-agent.js'

/** The registered agents, found by manifest id (uuid) or name. */
export class AgentRegistry {
  readonly #byId = new Map<string, HostedAgent>()
  readonly #byName = new Map<string, HostedAgent>()

  /**
   * Register an agent.
   * @throws Error naming the agent already registered under the same id or name
   */
  add (hosted: HostedAgent): void {
    const { id, name } = hosted.manifest.metadata
    const clash = this.#byId.get(id.toLowerCase()) ?? this.#byName.get(name)
    if (clash !== undefined) {
      const what = clash.manifest.metadata.id.toLowerCase() === id.toLowerCase() ? `id ${id}` : `name "${name}"`
      throw new Error(`${what} is already used by the agent at ${clash.source}`)
    }
    this.#byId.set(id.toLowerCase(), hosted)
    this.#byName.set(name, hosted)
  }

  /** The agent with this manifest id (any case) or, failing that, this name. */
  get (idOrName: string): HostedAgent | undefined {
    return this.#byId.get(idOrName.toLowerCase()) ?? this.#byName.get(idOrName)
  }

  /** All agents in registration order. */
  list (): HostedAgent[] {
    return [...this.#byId.values()]
  }

  get size (): number {
    return this.#byId.size
  }
}
