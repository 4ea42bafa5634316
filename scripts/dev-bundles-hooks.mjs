// The module hook of ./dev-bundles.mjs: a package the project imports resolves to its entry in the
// vendor build (./vendor-bundle.mjs), as in the test suite; any other loads as it is.
import { resolveVendored } from './vendor-bundle.mjs'

export async function resolve (specifier, context, nextResolve) {
  return resolveVendored(specifier, context.parentURL) ?? nextResolve(specifier, context)
}
