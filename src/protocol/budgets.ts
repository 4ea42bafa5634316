import { Type, type Static } from 'typebox'

// Model budgets: the operator's file of limits (BUDGETS_FILE) and what `GET /v1/usage` answers.
// See docs/security.md, "Budgets".

const closed = { additionalProperties: false } as const

/** The limits of one period: tokens (input + output) and cost in US dollars; an absent one is no limit. */
export const BudgetAmounts = Type.Object({
  tokens: Type.Optional(Type.Integer({ minimum: 0, description: 'input and output tokens together' })),
  cost_usd: Type.Optional(Type.Number({ minimum: 0, description: 'US dollars, priced from LLM_PRICES' }))
}, { ...closed, minProperties: 1, title: 'BudgetAmounts' })
export type BudgetAmounts = Static<typeof BudgetAmounts>

/** One tenant's or one key's limits: per UTC day, per UTC month, or both. */
export const BudgetEntry = Type.Object({
  day: Type.Optional(BudgetAmounts),
  month: Type.Optional(BudgetAmounts)
}, { ...closed, minProperties: 1 })
export type BudgetEntry = Static<typeof BudgetEntry>

/**
 * BUDGETS_FILE: `default` applies to every tenant `tenants` does not list (the tenant named
 * `default`, that of every key made without one, included); `keys`, by principal id (a key's id,
 * `config:<name>`, `jwt:<sub>`, or `tenant:<tenant>/<id>` in a tenant other than the default), apply
 * in addition to the key's tenant's. A missing entry is no limit.
 */
export const BudgetsFile = Type.Object({
  default: Type.Optional(BudgetEntry),
  tenants: Type.Optional(Type.Record(Type.String({ pattern: '^[a-z0-9][a-z0-9-]{0,62}$' }), BudgetEntry, { additionalProperties: false })),
  keys: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 512 }), BudgetEntry))
}, { ...closed, title: 'BudgetsFile' })
export type BudgetsFile = Static<typeof BudgetsFile>

/** Tokens and cost: used, or reserved by calls in flight. */
export const BudgetUsed = Type.Object({
  tokens: Type.Integer({ minimum: 0 }),
  cost_usd: Type.Number({ minimum: 0 })
}, closed)

/** One budget counter: a tenant's or a key's usage in the current day or month, its limits, and when it resets. */
export const BudgetUsage = Type.Object({
  tenant: Type.String({ description: 'the tenant the counter is of (a key\'s own tenant for a key\'s)' }),
  key: Type.Union([Type.String(), Type.Null()], { description: 'the key\'s principal id for a key\'s counter; null for the tenant\'s' }),
  period: Type.Union([Type.Literal('day'), Type.Literal('month')], { description: 'UTC day or UTC month' }),
  starts_at: Type.String({ format: 'date-time' }),
  resets_at: Type.String({ format: 'date-time' }),
  limit: Type.Union([BudgetAmounts, Type.Null()], { description: 'the limits BUDGETS_FILE sets; null: none (usage counted all the same)' }),
  used: BudgetUsed,
  reserved: Type.Object({
    tokens: Type.Integer({ minimum: 0 }),
    cost_usd: Type.Number({ minimum: 0 }),
    calls: Type.Integer({ minimum: 0, description: 'backend calls in flight whose reservation is live' })
  }, { ...closed, description: 'what backend calls in flight hold against it (live reservations only)' })
}, { ...closed, title: 'BudgetUsage' })
export type BudgetUsage = Static<typeof BudgetUsage>

/** `GET /v1/usage`. */
export const BudgetUsageList = Type.Object({
  budgets: Type.Array(BudgetUsage)
}, { ...closed, title: 'BudgetUsageList' })
export type BudgetUsageList = Static<typeof BudgetUsageList>

/** `GET /v1/usage`'s query. */
export const BudgetUsageQuery = Type.Object({
  tenant: Type.Optional(Type.String({ pattern: '^[a-z0-9][a-z0-9-]{0,62}$', description: 'only this tenant\'s counters (its own and its keys\')' }))
}, closed)
export type BudgetUsageQuery = Static<typeof BudgetUsageQuery>
