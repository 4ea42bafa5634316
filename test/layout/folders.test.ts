import t from 'tap'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

/** Every .ts file under `dir`. */
function files (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [])
}

/** The folder a file belongs to: its first path segment under src/; a top-level file is a node of its own (`config.ts`, whether named by its source or its `.js` import). */
function folderOf (file: string): string {
  return (relative(SRC, file).split('/')[0] as string).replace(/\.js$/, '.ts')
}

/** Folder → the folders its files import (type-only imports included: a cycle of types is still a cycle). */
function folderGraph (): Map<string, Map<string, string[]>> {
  const graph = new Map<string, Map<string, string[]>>()
  for (const file of files(SRC)) {
    const from = folderOf(file)
    for (const { fileName } of ts.preProcessFile(readFileSync(file, 'utf8'), true, false).importedFiles) {
      if (!fileName.startsWith('.')) continue
      const target = resolve(dirname(file), fileName)
      if (!target.startsWith(SRC)) continue
      const to = folderOf(target)
      if (to === from) continue
      const edges = graph.get(from) ?? new Map<string, string[]>()
      edges.set(to, [...(edges.get(to) ?? []), relative(SRC, file)])
      graph.set(from, edges)
    }
  }
  return graph
}

t.test('no import cycles between the folders and top-level files of src/', async (t) => {
  const graph = folderGraph()
  const cycles: string[] = []
  for (const [a, edges] of graph) {
    for (const b of edges.keys()) {
      // a → b and b →* a
      const seen = new Set<string>([b])
      const stack = [b]
      while (stack.length > 0) {
        const node = stack.pop() as string
        for (const next of graph.get(node)?.keys() ?? []) {
          if (next === a) cycles.push(`${a} → ${b} (${(edges.get(b) ?? []).slice(0, 2).join(', ')}) → … → ${a} (${(graph.get(node)?.get(a) ?? []).slice(0, 2).join(', ')})`)
          if (!seen.has(next)) { seen.add(next); stack.push(next) }
        }
      }
    }
  }
  t.same([...new Set(cycles)], [], 'folder dependencies go one way')
})

t.test('protocol/ holds no logic of other folders; the engine, runtime/ and agents/ know nothing of HTTP', async (t) => {
  const graph = folderGraph()
  t.same([...(graph.get('protocol')?.keys() ?? [])].filter((to) => to !== 'errors.ts'), [], 'protocol/ imports no other folder (the error codes are shared)')
  for (const folder of ['assist', 'runtime', 'agents', 'storage', 'backends']) {
    for (const http of ['http', 'routes', 'plugins']) {
      t.notOk(graph.get(folder)?.has(http), `${folder}/ does not import ${http}/: ${(graph.get(folder)?.get(http) ?? []).join(', ')}`)
    }
  }
  for (const file of files(join(SRC, 'assist'))) t.notMatch(readFileSync(file, 'utf8'), /from 'fastify'/, `${relative(SRC, file)} does not import Fastify`)
  // a route reaches what a plugin made through the app it decorated (app.errorAnswer, request.runTrace), never the plugin's file
  t.notOk(graph.get('routes')?.has('plugins'), `routes/ imports no plugin file: ${(graph.get('routes')?.get('plugins') ?? []).join(', ')}`)
  // one loop writes every SSE answer (CAP, A2A, the feeds): its slot, backpressure, and how it ends
  t.same(files(SRC).filter((file) => readFileSync(file, 'utf8').includes('new SseWriter(')).map((file) => relative(SRC, file)), ['routes/sse.ts'], 'an SSE answer is written by routes/sse.ts:sendSse only')
})

// `agent-host --version` and `--help` took 0.5 s of CPU loading every command (the app's storage,
// runtime and backends); each command's module is now imported only when it runs (0.08 s)
t.test('src/commands.ts imports no command statically: each is import()ed when it runs', async (t) => {
  const source = readFileSync(join(SRC, 'commands.ts'), 'utf8')
  // value imports: a type-only import (the commands' shared CommandIo) is erased from the JavaScript
  const statics = [...source.matchAll(/^import\s(?!type\s)[^;]*?from\s+'([^']+)'/gm)].map((m) => m[1] as string).filter((from) => from.startsWith('.'))
  t.same(statics, ['../package.json', './commands/usage.js'], 'only the version and the usage text, statically')
  for (const command of ['audit-verify', 'backup', 'keys', 'worker']) t.match(source, `await import('./commands/${command}.js')`, `${command} when it runs`)
})

/** Folders of test/ that test what is not under src/ (the repository's other folders, or the suite itself), each with what it tests. */
const BEYOND_SRC: Readonly<Record<string, string>> = {
  bench: 'bench/: the benchmarks\' smoke runs',
  client: 'client/: the TypeScript client',
  deploy: 'the Dockerfile and compose.yaml',
  docs: 'docs/ and the README: their commands, run as pasted',
  fixtures: 'what the tests run: agents, scripts, servers',
  hostile: 'attacks on the whole server',
  layout: 'the rules of the house (this file)',
  measure: 'the test loader and its measurements (test/measure/)',
  playground: 'playground/: the browser page',
  scripts: 'scripts/: the test runner, CI and the tools'
}

/** Files at test/ root that are not tests of a top-level file of src/: the suite's own helpers' tests. */
const ROOT_TESTS_BEYOND_SRC = new Set(['host-programs.test.ts'])

t.test('test/ mirrors src/: a folder per folder of src/ (or of what BEYOND_SRC names), and at its root only tests of src/\'s top-level files', async (t) => {
  const TEST = fileURLToPath(new URL('..', import.meta.url))
  const srcFolders = new Set(readdirSync(SRC, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name))
  const topLevel = readdirSync(SRC).filter((name) => name.endsWith('.ts')).map((name) => name.slice(0, -3))
  for (const entry of readdirSync(TEST, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      t.ok(srcFolders.has(entry.name) || entry.name in BEYOND_SRC, `test/${entry.name}/ is named after a folder of src/, or says in BEYOND_SRC what it tests`)
    } else if (entry.name.endsWith('.test.ts') && !ROOT_TESTS_BEYOND_SRC.has(entry.name)) {
      // config.test.ts tests src/config.ts; backup-restore.test.ts and server-process.test.ts test backup.ts and server.ts
      t.ok(topLevel.some((name) => entry.name === `${name}.test.ts` || entry.name.startsWith(`${name}-`)), `test/${entry.name} tests a top-level file of src/ (else it belongs in the folder of what it tests)`)
    }
  }
  for (const folder of srcFolders) t.ok(existsSync(join(TEST, folder)), `src/${folder}/ has its tests in test/${folder}/`)
})

/** Whether `file` imports (statically or with `import()`) a module for which `matches` holds of its path (resolved under src/, or the package's name). */
function importsOf (file: string): string[] {
  return ts.preProcessFile(readFileSync(file, 'utf8'), true, true).importedFiles.map(({ fileName }) => fileName.startsWith('.') ? relative(SRC, resolve(dirname(file), fileName)) : fileName)
}

t.test('one place picks the storage driver, and the ports hold no driver', async (t) => {
  const DRIVER = /^storage\/(sqlite|postgres|file)\/|^(pg|better-sqlite3)$/
  const outside = files(SRC).filter((file) => !/^storage\/(sqlite|postgres|file)\//.test(relative(SRC, file)) && importsOf(file).some((to) => DRIVER.test(to))).map((file) => relative(SRC, file))
  // backup.ts copies DATA_DIR: the database with the SQLite driver's online copy, the task graph under the file store's lock
  t.same(outside.sort(), ['backup.ts', 'plugins/storage.ts'], 'a driver\'s code is imported by plugins/storage.ts (openStores) and nothing else')
  for (const file of files(join(SRC, 'storage')).filter((f) => !/^storage\/(sqlite|postgres|file)\//.test(relative(SRC, f)))) {
    const source = readFileSync(file, 'utf8')
    t.notMatch(source, /\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE)\b/, `${relative(SRC, file)} holds no SQL`)
  }
})
