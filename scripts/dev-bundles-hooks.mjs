// The module hook of ./dev-bundles.mjs: `typebox` and `jose` resolve to their bundles (a subpath,
// `typebox/value`, loads as it is); any package that cannot be bundled loads as it is.
import { BUNDLED, bundle } from '../test/measure/typescript-hooks.mjs'

export async function resolve (specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context)
  if (!BUNDLED.has(specifier)) return resolved
  const url = bundle(specifier, resolved.url)
  return url === undefined ? resolved : { ...resolved, url, shortCircuit: true }
}
