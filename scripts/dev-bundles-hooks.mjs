// The module hook of ./dev-bundles.mjs: a package the project imports resolves to its entry in the
// vendor build (./vendor-bundle.mjs), as in the test suite; any other loads as it is.
import { fromProject, vendorEntries } from './vendor-bundle.mjs'

export async function resolve (specifier, context, nextResolve) {
  if (fromProject(context.parentURL)) {
    const url = vendorEntries().get(specifier)
    if (url !== undefined) return { url, format: 'module', shortCircuit: true }
  }
  return nextResolve(specifier, context)
}
