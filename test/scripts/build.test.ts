import t from 'tap'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pruneOutputs, sourcesOf } from '../../scripts/build.js'

// The build's whole run (tsc -b, then this) is test/layout/build.test.ts; here, which outputs stay.

t.test('a compiled file names the sources it may come from', async (t) => {
  t.same(sourcesOf('a/b.js'), ['a/b.ts', 'a/b.tsx', 'a/b.mts', 'a/b.cts', 'a/b.js', 'a/b.jsx', 'a/b.mjs', 'a/b.cjs'])
  t.equal(sourcesOf('a/b.d.ts.map')[0], 'a/b.ts', 'a declaration map')
  t.equal(sourcesOf('a/b.js.map')[0], 'a/b.ts', 'a source map')
  t.equal(sourcesOf('a/b.d.mts')[0], 'a/b.ts')
  t.same(sourcesOf('a/manifest.json'), ['a/manifest.json'], 'a JSON file an agent imports is copied as it is')
})

t.test('outputs without their source go, with the folders they leave empty; the rest and the build info stay', async (t) => {
  const dir = t.testdir({
    agents: { kept: { 'index.ts': '', 'helper.js': '', 'manifest.json': '{}' } },
    out: {
      '.tsbuildinfo': '{}',
      kept: { 'index.js': '', 'index.js.map': '', 'index.d.ts': '', 'helper.js': '', 'manifest.json': '{}', 'old.js': '', 'old.d.ts.map': '' },
      deleted: { 'index.js': '', 'index.d.ts': '', nested: { 'deep.js': '' } }
    }
  })
  const removed = pruneOutputs(join(dir, 'agents'), join(dir, 'out'))
  t.same(removed.sort(), ['deleted/index.d.ts', 'deleted/index.js', 'deleted/nested/deep.js', 'kept/old.d.ts.map', 'kept/old.js'])
  t.notOk(existsSync(join(dir, 'out/deleted')), 'the deleted agent\'s folder is gone')
  for (const file of ['.tsbuildinfo', 'kept/index.js', 'kept/index.js.map', 'kept/index.d.ts', 'kept/helper.js', 'kept/manifest.json']) t.ok(existsSync(join(dir, 'out', file)), file)
  t.same(pruneOutputs(join(dir, 'agents'), join(dir, 'nowhere')), [], 'no output folder: nothing to do')
})

t.test('an output folder that is only empty folders is emptied, not removed', async (t) => {
  const dir = t.testdir({ src: {}, out: { a: { b: {} } } })
  mkdirSync(join(dir, 'out/c'))
  writeFileSync(join(dir, 'out/c/x.js'), '')
  t.same(pruneOutputs(join(dir, 'src'), join(dir, 'out')), ['c/x.js'])
  t.ok(existsSync(join(dir, 'out')), 'the output folder itself stays')
  t.notOk(existsSync(join(dir, 'out/a')))
})
