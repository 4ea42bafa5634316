import type { AgentProtocol, ProtocolContext, StartConfig } from '../backends/protocol.js'
import type { Spend } from '../storage/budgets.js'
import type { BudgetHold, CallEstimate } from './budgets.js'

/**
 * `protocol` with each call of `send` and `resume` held to the budgets: before the call, `hold`
 * reserves its estimate (the `maxTokens` and `model` its session was started with, when it named
 * them), and a refusal rejects the call with 429 AH_ERR_BUDGET_EXCEEDED before anything reaches the
 * backend; once the call ends, failed or not, the reservation is settled with the tokens and cost of
 * the usage chunks it reported. Every chunk still reaches the agent. `hold` is one owner's (a run's
 * caller, a task's owner): `Budgets.holder(owner)`.
 */
export function budgetedBackend (protocol: AgentProtocol, hold: BudgetHold): AgentProtocol {
  const sessions = new Map<string, CallEstimate>()
  const start = async (config: StartConfig, ctx: ProtocolContext): Promise<string> => {
    const id = await protocol.start(config, ctx)
    sessions.set(id, { ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}), ...(config.model !== undefined ? { model: config.model } : {}) })
    return id
  }
  const held = <T>(call: (sessionId: string, messages: unknown, ctx: ProtocolContext) => Promise<T>) =>
    async (sessionId: string, messages: unknown, ctx?: ProtocolContext): Promise<T> => {
      const reservation = await hold(sessions.get(sessionId) ?? {})
      const used: Spend = { tokens: 0, cost_usd: 0 }
      const forward = ctx?.onStreamMessage
      try {
        return await call(sessionId, messages, {
          ...ctx,
          onStreamMessage: async (chunk) => {
            if (chunk.type === 'usage') {
              used.tokens += chunk.usage.input + chunk.usage.output
              used.cost_usd += chunk.cost
            }
            return await forward?.(chunk)
          }
        })
      } finally {
        await reservation.settle(used)
      }
    }
  return new Proxy(protocol, {
    get: (target, key) => {
      // the target as `this`: protocols keep their state in private fields, which a proxy does not have
      const value = Reflect.get(target, key, target) as unknown
      if (typeof value !== 'function') return value
      const method = value.bind(target) as (...args: unknown[]) => Promise<unknown>
      if (key === 'start') return start
      if (key !== 'send' && key !== 'resume') return method
      return held(method)
    }
  })
}
