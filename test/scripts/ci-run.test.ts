import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const CI = readFileSync(join(ROOT, '.ci/run'), 'utf8')

/** The files .ci/run runs again on Node.js 24. */
function node24Tests (): string[] {
  const list = /^NODE24_TESTS=\(\n([\s\S]*?)\n\)$/m.exec(CI)?.[1] ?? ''
  return list.split('\n').filter((line) => !line.trim().startsWith('#')).flatMap((line) => line.trim().split(/\s+/)).filter((f) => f !== '')
}

t.test('the Node.js 24 subset names test files that exist, once each', async (t) => {
  const files = node24Tests()
  t.ok(files.length >= 10, files.join(' '))
  t.same(files.filter((f) => !/^test\/.*\.test\.ts$/.test(f) || !existsSync(join(ROOT, f))), [], 'no missing or misspelt file')
  t.equal(new Set(files).size, files.length, 'no file twice')
})

t.test('the subset covers what differs between the runtimes', async (t) => {
  const files = node24Tests()
  for (const needed of [
    'test/storage/runs.test.ts', // the native addon
    'test/server-process.test.ts', // boot and shutdown
    'test/commands/output.test.ts', // the CLI
    'test/deploy/dockerfile.test.ts', // the image's steps, on the image's runtime
    'test/routes/routes.test.ts', 'test/http/sse-socket.test.ts', 'test/a2a/a2a-server.test.ts', 'test/mcp/mcp-server.test.ts' // each protocol
  ]) t.ok(files.includes(needed), needed)
})

t.test('the whole suite runs once, as the README says, with the coverage gate', async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  t.match(readme, /^```sh\n.*\nnpm ci && npm test +#/m, 'the README\'s test command')
  t.match(CI, /^phase 'npm test \(Node\.js 20, coverage\)' npm test \|\| status=\$\?$/m, 'run exactly, coverage on')
  t.match(CI, /npm test -- --disable-coverage "\$\{NODE24_TESTS\[@\]\}"/, 'the subset, by name')
})
