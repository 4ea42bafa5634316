import picomatch from 'picomatch'
import type { JsonObject } from '../backends/protocol.js'
import type { BranchScopeSpec } from './servers-file.js'

/**
 * A git-like tool's branch scope (the seed's `branch_pattern`): every branch-valued argument a
 * call carries must be a branch name the glob matches (`tdev/auto/*`: one level under
 * `tdev/auto/`). A call without such an argument (`status`, `log`) is not concerned.
 */
export class BranchScope {
  readonly spec: BranchScopeSpec
  readonly #matches: (branch: string) => boolean

  constructor (spec: BranchScopeSpec) {
    this.spec = spec
    this.#matches = picomatch(spec.pattern)
  }

  /** Why `args` is refused, or undefined when every branch argument matches. */
  refusal (args: JsonObject): string | undefined {
    for (const name of this.spec.arguments) {
      if (!Object.hasOwn(args, name)) continue
      const value = args[name]
      if (typeof value !== 'string' || !this.#matches(value)) {
        return `argument "${name}" ${JSON.stringify(value)} does not match the tool's branch pattern ${this.spec.pattern}`
      }
    }
    return undefined
  }
}
