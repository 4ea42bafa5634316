import t from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// Every page of the documentation holds together: no relative link to a file that is not there, no
// link to a heading that is not there, and every shell block of README.md and docs/ is run by a test
// (one that takes it with docBlocks or docSection of test/docs/doc-blocks.ts), or says why not.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const SKIP = new Set(['node_modules', '.git', '.tap', 'dist', 'coverage', 'data', 'test', 'results'])

/** The Markdown pages of the repository (its fixtures and build output left out), relative to its root. */
export function pages (dir = ROOT): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isDirectory()) return SKIP.has(entry.name) ? [] : pages(join(dir, entry.name))
    return entry.name.endsWith('.md') ? [relative(ROOT, join(dir, entry.name))] : []
  }).sort()
}

/** The lines of `text` outside fenced code blocks, with their numbers (from 1). */
function prose (text: string): Array<[number, string]> {
  let fenced = false
  return text.split('\n').flatMap((line, i): Array<[number, string]> => {
    if (line.startsWith('```')) { fenced = !fenced; return [] }
    return fenced ? [] : [[i + 1, line]]
  })
}

/** GitHub's anchors for the headings of `text` (lower case, punctuation dropped, spaces as dashes, repeats numbered), and explicit `<a id>`s. */
export function anchors (text: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const [, line] of prose(text)) {
    for (const m of line.matchAll(/<a (?:id|name)="([^"]+)"/g)) out.add(m[1] as string)
    const heading = /^#{1,6} (.*)$/.exec(line)?.[1]
    if (heading === undefined) continue
    const base = heading.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replaceAll(' ', '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

/** Every broken relative link of `page`: `page:line: target (why)`. */
export function brokenLinks (page: string, read: (path: string) => string = (p) => readFileSync(join(ROOT, p), 'utf8')): string[] {
  const text = read(page)
  const broken: string[] = []
  for (const [n, line] of prose(text)) {
    const visible = line.replace(/`[^`]*`/g, '')
    for (const m of visible.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] as string
      if (/^[a-z]+:/.test(target)) continue
      const [path, anchor] = target.split('#') as [string, string | undefined]
      const file = path === '' ? page : relative(ROOT, resolve(ROOT, dirname(page), path))
      if (path !== '' && (file.startsWith('..') || !existsSync(join(ROOT, file)))) { broken.push(`${page}:${n}: ${target} (no such file)`); continue }
      if (anchor === undefined || !file.endsWith('.md') || (path !== '' && statSync(join(ROOT, file)).isDirectory())) continue
      if (!anchors(read(file)).has(anchor)) broken.push(`${page}:${n}: ${target} (no such heading in ${file})`)
    }
  }
  return broken
}

/** The sections tests take blocks from: `file\0heading`, from every docBlocks/docSection call under test/. */
function testedSections (dir = join(ROOT, 'test')): Set<string> {
  const out = new Set<string>()
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue
    const source = readFileSync(join(entry.parentPath, entry.name), 'utf8')
    for (const m of source.matchAll(/doc(?:Blocks|Section)\('([^']+)', '((?:[^'\\]|\\.)+)'/g)) out.add(`${m[1] as string}\0${(m[2] as string).replaceAll("\\'", "'")}`)
  }
  return out
}

/** The `sh` blocks of README.md and docs/ that no test runs and that do not say why: `page:line: heading`. */
function unrunBlocks (tested: Set<string>): string[] {
  const out: string[] = []
  for (const page of pages().filter((p) => p === 'README.md' || p.startsWith('docs/'))) {
    const lines = readFileSync(join(ROOT, page), 'utf8').split('\n')
    const headings: string[] = []
    let fenced = false
    lines.forEach((line, i) => {
      if (line.startsWith('```')) {
        if (!fenced && line === '```sh') {
          const covered = headings.some((h) => tested.has(`${page}\0${h}`))
          const excused = /^<!-- not run: .+ -->$/.test(lines[i - 1] ?? '') || /^<!-- not run: .+ -->$/.test(lines[i - 2] ?? '')
          if (!covered && !excused) out.push(`${page}:${i + 1}: ${headings.at(-1) ?? '(top)'}`)
        }
        fenced = !fenced
        return
      }
      const level = fenced ? undefined : /^(#{1,6}) /.exec(line)?.[1]?.length
      if (level !== undefined) { headings.splice(level - 1); headings[level - 1] = line }
    })
  }
  return out
}

t.test('the documentation is found: README.md and every guide', async (t) => {
  const found = pages()
  for (const page of ['README.md', 'ARCHITECTURE.md', 'agents/README.md', 'docs/getting-started.md', 'docs/protocol.md']) t.ok(found.includes(page), page)
})

// regression (issue 31): the guides said `npx agent-host <command>`. In the project folder npx installs
// the checkout into its cache first (some 5 s a command), and does not pass SIGTERM on: a worker
// stopped through it was left running. test/layout/build.test.ts stops the documented command's worker.
t.test('every page runs the command line as node dist/src/cli.js (package.json\'s bin), never through npx agent-host', async (t) => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> }
  t.equal(pkg.bin['agent-host'], 'dist/src/cli.js')
  for (const page of pages()) {
    const text = readFileSync(join(ROOT, page), 'utf8')
    const through = text.split('\n').flatMap((line, i) => /npx agent-host\b/.test(line) && !line.includes('Not `npx agent-host`') ? [`${page}:${i + 1}: ${line.trim()}`] : [])
    t.same(through, [], `${page} does not run it through npx`)
  }
  t.match(readFileSync(join(ROOT, 'docs/reference/cli.md'), 'utf8'), /Run it as `node dist\/src\/cli\.js <command>`, in the project folder as in the container image/, 'the command line reference says how to run it')
})

t.test('no relative link of any page is dead: every file and every heading it names is there', async (t) => {
  t.same(pages().flatMap((page) => brokenLinks(page)), [])
})

t.test('the check finds a dead file, a dead heading on another page and on its own, and reads GitHub\'s anchors', async (t) => {
  const files: Record<string, string> = {
    'docs/a.md': '# A page\n\n## Keys and tokens (`apikey`)\n\n## Twice\n\n## Twice\n\n[x](nope.md) [y](security.md#no-such) [z](#twice-1) [w](#nowhere) `[v](nope.md)`\n\n```sh\n[u](nope.md)\n```\n',
    'docs/security.md': readFileSync(join(ROOT, 'docs/security.md'), 'utf8')
  }
  const read = (p: string): string => files[p] ?? readFileSync(join(ROOT, p), 'utf8')
  t.same(brokenLinks('docs/a.md', read), [
    'docs/a.md:9: nope.md (no such file)',
    'docs/a.md:9: security.md#no-such (no such heading in docs/security.md)',
    'docs/a.md:9: #nowhere (no such heading in docs/a.md)'
  ])
  t.ok(anchors(files['docs/a.md'] as string).has('keys-and-tokens-apikey'))
})

t.test('every shell block of README.md and docs/ is run by a test, or says why not (<!-- not run: why -->)', async (t) => {
  const tested = testedSections()
  t.ok(tested.has('docs/task-graph-and-bus.md\0### Walkthrough: review a new agent'), 'the tests\' sections are found')
  t.same(unrunBlocks(tested), [])
  t.not(unrunBlocks(new Set()).length, 0, 'with no test, blocks are found unrun')
})
