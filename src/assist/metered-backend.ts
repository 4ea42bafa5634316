import { AsyncLocalStorage } from 'node:async_hooks'
import type { AgentProtocol, ProtocolContext, TokenUsage } from '../backends/protocol.js'

/** Set while a backend's usage chunk is handed to the agent's `onStreamMessage`. */
const handingOver = new AsyncLocalStorage<true>()

/**
 * Whether this call happens while a metered backend hands its usage to the agent: a `usage()`
 * report made now (`capBridge` makes one for every usage chunk) repeats usage already counted.
 */
export function repeatsBackendUsage (): boolean {
  return handingOver.getStore() === true
}

/**
 * `protocol` with the usage of each call of `send` and `resume` told to `count` (its tokens, cost
 * and the model the backend names), whether or not the agent passes an `onStreamMessage`. Nothing
 * else changes: every chunk still reaches the agent, and the agent's own context is not modified.
 */
export function meteredBackend (protocol: AgentProtocol, count: (usage: TokenUsage, cost: number, model: string | undefined) => void): AgentProtocol {
  const metered = (ctx: ProtocolContext | undefined): ProtocolContext => {
    const forward = ctx?.onStreamMessage
    return {
      ...ctx,
      onStreamMessage: async (chunk) => {
        if (chunk.type !== 'usage') return await forward?.(chunk)
        count(chunk.usage, chunk.cost, chunk.model)
        if (forward !== undefined) await handingOver.run(true, async () => await forward(chunk))
      }
    }
  }
  return new Proxy(protocol, {
    get: (target, key) => {
      // the target as `this`: protocols keep their state in private fields, which a proxy does not have
      const value = Reflect.get(target, key, target) as unknown
      if (typeof value !== 'function') return value
      const method = value.bind(target) as (...args: unknown[]) => unknown
      if (key !== 'send' && key !== 'resume') return method
      return async (sessionId: string, messages: unknown, ctx?: ProtocolContext) => await method(sessionId, messages, metered(ctx))
    }
  })
}
