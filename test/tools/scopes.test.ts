import t from 'tap'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BranchScope } from '../../src/tools/branch-scope.js'
import { PathScope } from '../../src/tools/path-scope.js'
import { DEFAULT_PATH_ARGUMENTS } from '../../src/tools/servers-file.js'
import { tempDir } from '../fixtures/tools/servers.js'

/** A root with `packages/a.ts`, `tests/t.ts`, `docs/d.md` and `packages/.env`, and a folder beside it with a secret. */
function layout (t: Parameters<typeof tempDir>[0]): { root: string, outside: string, scope: PathScope } {
  const base = tempDir(t)
  const root = join(base, 'root')
  const outside = join(base, 'outside')
  for (const dir of ['packages', 'tests', 'docs']) mkdirSync(join(root, dir), { recursive: true })
  mkdirSync(outside)
  writeFileSync(join(root, 'packages/a.ts'), 'a')
  writeFileSync(join(root, 'packages/.env'), 'TOKEN=1')
  writeFileSync(join(root, 'tests/t.ts'), 't')
  writeFileSync(join(root, 'docs/d.md'), 'd')
  writeFileSync(join(outside, 'secret.txt'), 'secret')
  return { root, outside, scope: new PathScope({ root, patterns: ['packages/**', 'tests/**'], arguments: DEFAULT_PATH_ARGUMENTS }) }
}

t.test('a path in scope passes, sent as the absolute real path that was checked', async (t) => {
  const { root, scope } = layout(t)
  t.same(await scope.check({ path: 'packages/a.ts', other: '../../anything' }), { ok: true, args: { path: join(root, 'packages/a.ts'), other: '../../anything' } }, 'arguments that hold no path are not touched')
  t.same(await scope.check({ path: join(root, 'tests/t.ts') }), { ok: true, args: { path: join(root, 'tests/t.ts') } }, 'an absolute path inside the scope')
  t.same(await scope.check({ path: 'packages' }), { ok: true, args: { path: join(root, 'packages') } }, 'the folder a glob is under')
  t.same(await scope.check({ path: 'packages/new/deep/file.ts' }), { ok: true, args: { path: join(root, 'packages/new/deep/file.ts') } }, 'a file still to be made: its nearest existing parent is resolved')
  t.same(await scope.check({ paths: ['packages/a.ts', 'tests/t.ts'] }), { ok: true, args: { paths: [join(root, 'packages/a.ts'), join(root, 'tests/t.ts')] } }, 'a list of paths')
  t.same(await scope.check({ source: 'packages/a.ts', destination: 'tests/a.ts' }), { ok: true, args: { source: join(root, 'packages/a.ts'), destination: join(root, 'tests/a.ts') } })
  t.same(await scope.check({}), { ok: true, args: {} }, 'no path argument, nothing to check')
})

t.test('no escape by .., an absolute path outside or a glob not in scope', async (t) => {
  const { outside, scope } = layout(t)
  t.match(await scope.check({ path: '../outside/secret.txt' }), { ok: false, reason: /argument "path" "\.\.\/outside\/secret\.txt" resolves outside the tool's root/ })
  t.match(await scope.check({ path: 'packages/../../outside/secret.txt' }), { ok: false, reason: /resolves outside the tool's root/ }, '.. inside a path')
  t.match(await scope.check({ path: join(outside, 'secret.txt') }), { ok: false, reason: /resolves outside the tool's root/ }, 'an absolute path')
  t.match(await scope.check({ path: '/' }), { ok: false, reason: /outside the tool's root/ })
  t.match(await scope.check({ path: 'docs/d.md' }), { ok: false, reason: /"docs\/d\.md" \(docs\/d\.md\) is not in the tool's scope \(packages\/\*\*, tests\/\*\*\)/ }, 'under the root, not in a glob')
  t.match(await scope.check({ path: '.' }), { ok: false, reason: /\(the root itself\) is not in the tool's scope/ })
  t.match(await scope.check({ path: 'packages/.env' }), { ok: false, reason: /is not in the tool's scope/ }, 'a dotfile needs a glob that names dotfiles')
  t.match(await scope.check({ paths: ['packages/a.ts', 'docs/d.md'] }), { ok: false, reason: /argument "paths" "docs\/d\.md"/ }, 'one path of a list')
  t.match(await scope.check({ source: 'packages/a.ts', destination: '../outside/a.ts' }), { ok: false, reason: /argument "destination"/ }, 'a move out of the scope')
})

t.test('no escape by a symbolic link: links are followed to where they lead', async (t) => {
  const { root, outside, scope } = layout(t)
  symlinkSync(outside, join(root, 'packages/out'))
  symlinkSync(join(outside, 'secret.txt'), join(root, 'packages/secret.txt'))
  symlinkSync(join(root, 'docs'), join(root, 'packages/docs'))
  symlinkSync(join(root, 'packages'), join(root, 'pkg'))
  symlinkSync(join(outside, 'missing.txt'), join(root, 'packages/dangling'))
  symlinkSync(join(root, 'packages/loop-b'), join(root, 'packages/loop-a'))
  symlinkSync(join(root, 'packages/loop-a'), join(root, 'packages/loop-b'))
  t.match(await scope.check({ path: 'packages/out/secret.txt' }), { ok: false, reason: /resolves outside the tool's root/ }, 'a linked folder pointing outside')
  t.match(await scope.check({ path: 'packages/secret.txt' }), { ok: false, reason: /resolves outside the tool's root/ }, 'a linked file pointing outside')
  t.match(await scope.check({ path: 'packages/out/new.txt' }), { ok: false, reason: /resolves outside the tool's root/ }, 'a file to be made through a link pointing outside')
  t.match(await scope.check({ path: 'packages/docs/d.md' }), { ok: false, reason: /\(docs\/d\.md\) is not in the tool's scope/ }, 'a link to a folder under the root but out of scope')
  t.match(await scope.check({ path: 'packages/dangling' }), { ok: false, reason: /goes through a symbolic link to nothing/ }, 'a link to nothing (writing through it would make a file outside)')
  t.match(await scope.check({ path: 'packages/loop-a' }), { ok: false, reason: /cannot be resolved \(ELOOP\)/ }, 'a loop of links')
  t.same(await scope.check({ path: 'pkg/a.ts' }), { ok: true, args: { path: join(root, 'packages/a.ts') } }, 'a link into the scope is judged (and sent) by where it leads')
})

t.test('a path argument that is not a path or a list of paths is refused', async (t) => {
  const { scope } = layout(t)
  for (const path of [42, null, { p: 'x' }, ['packages/a.ts', 7]]) {
    t.match(await scope.check({ path }), { ok: false, reason: 'argument "path" must be a path or a list of paths, for the scope check' }, JSON.stringify(path))
  }
})

t.test('a branch scope holds every branch argument to its glob, and leaves calls without one alone', async (t) => {
  const scope = new BranchScope({ pattern: 'tdev/auto/*', arguments: ['branch', 'base'] })
  t.equal(scope.refusal({ branch: 'tdev/auto/fix-1' }), undefined)
  t.equal(scope.refusal({ message: 'commit' }), undefined, 'no branch argument')
  t.equal(scope.refusal({ branch: 'main' }), 'argument "branch" "main" does not match the tool\'s branch pattern tdev/auto/*')
  t.match(scope.refusal({ branch: 'tdev/auto/a/b' }), /does not match/, '* is one level')
  t.match(scope.refusal({ branch: 'tdev/auto/ok', base: 'release' }), /argument "base" "release"/, 'every branch argument')
  t.match(scope.refusal({ branch: ['tdev/auto/x'] }), /argument "branch" \["tdev\/auto\/x"\] does not match/, 'not a string')
})
