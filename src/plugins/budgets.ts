import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { Budgets } from '../assist/budgets.js'
import { loadBudgets } from '../assist/budgets-file.js'
import { parsePrices } from '../config.js'
import { AH_ERR_BUDGET_EXCEEDED } from '../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The model budgets of BUDGETS_FILE over `Stores.budgets` (`assist/budgets.ts`). */
    budgets: Budgets
  }
}

/**
 * The model budgets: BUDGETS_FILE read and checked at boot (a bad file stops it with
 * `AH_ERR_CONFIG_INVALID`, one line per problem), counted in the shared store, priced from
 * LLM_PRICES. A refusal answered over HTTP carries `Retry-After`: the seconds until its period resets.
 */
async function budgets (app: FastifyInstance): Promise<void> {
  const config = app.config
  const file = loadBudgets(config.BUDGETS_FILE)
  const made = new Budgets({
    file,
    store: app.stores.budgets,
    estimateTokens: config.BUDGET_CALL_ESTIMATE_TOKENS,
    reservationMs: config.BUDGET_RESERVATION_MS,
    prices: parsePrices(config.LLM_PRICES)
  })
  if (made.enabled) app.log.info({ tenants: Object.keys(file.tenants ?? {}), default: file.default !== undefined, keys: Object.keys(file.keys ?? {}).length }, 'model budgets configured')
  app.decorate('budgets', made)
  app.addHook('onError', async (_request, reply, error) => {
    if (error instanceof AH_ERR_BUDGET_EXCEEDED && !reply.sent) reply.header('retry-after', String(error.retryAfter))
  })
}

export default fp(budgets, { name: 'budgets', fastify: '5.x', dependencies: ['config', 'storage'] })
