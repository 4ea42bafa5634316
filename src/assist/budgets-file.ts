import { lazySchema, settingsFile } from '../agents/json-schema.js'
import { BudgetsFile } from '../protocol/budgets.js'

const checkFile = lazySchema<BudgetsFile>(BudgetsFile)

/**
 * Read BUDGETS_FILE: the model budgets of tenants (`default` for those it does not list) and keys.
 * Every problem is reported, one line each, naming its place in the file.
 * @param path the file; empty: no budgets (an empty object)
 * @throws AH_ERR_CONFIG_INVALID naming the file and each problem
 */
export function loadBudgets (path: string): BudgetsFile {
  if (path === '') return {}
  return settingsFile('BUDGETS_FILE', path, checkFile, readable).parsed
}

/** A schema issue as a line of the boot error; a tenant name the pattern refuses is said as such (the validator calls it an additional property). */
function readable (issue: { path: string, message: string }): string {
  if (issue.message === 'must NOT have additional properties' && /^\/tenants\/[^/]+$/.test(issue.path)) {
    return `${issue.path}: a tenant's name is 1 to 63 of a-z, 0-9 and "-", starting with a letter or digit`
  }
  if (issue.message === 'must NOT have fewer than 1 properties') return `${issue.path}: give at least one of ${/\/(day|month)$/.test(issue.path) ? 'tokens and cost_usd' : 'day and month'}`
  return `${issue.path}: ${issue.message}`
}
