import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { BudgetUsageList, BudgetUsageQuery } from '../../protocol/budgets.js'
import { viewerOf } from '../../auth/scopes.js'

/** `GET /v1/usage`: model budgets and what was used of them, per tenant and key, this day and month. */
const usageRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/usage', {
    schema: {
      operationId: 'listBudgetUsage',
      tags: ['backends'],
      summary: 'Model budgets and their usage',
      description: 'Per tenant and per key, for the current UTC day and month: the limits BUDGETS_FILE sets (null: none), the tokens and cost used (priced from LLM_PRICES), what backend calls in flight hold (live reservations), and when the period resets. Lists every tenant and key the file limits and every one that used a model this period; empty without BUDGETS_FILE. `tenant` narrows it to one tenant\'s counters and its keys\'. The host\'s `admin` reads every tenant\'s; a `tenant-admin` its own tenant\'s only (another tenant named is an empty list).',
      querystring: BudgetUsageQuery,
      response: { 200: BudgetUsageList }
    }
  }, async (request) => {
    const viewer = viewerOf(request.identity)
    if ('all' in viewer) return { budgets: await app.budgets.usage(request.query.tenant) }
    const tenant = 'tenant' in viewer ? viewer.tenant : undefined
    return { budgets: tenant === undefined || (request.query.tenant !== undefined && request.query.tenant !== tenant) ? [] : await app.budgets.usage(tenant) }
  })
}

export default usageRoutes
