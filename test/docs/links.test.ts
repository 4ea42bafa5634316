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

/** Which `sh` blocks of a section tests take: all of them, or these (by their place among the section's `sh` blocks, from 0). */
type Taken = 'all' | Set<number>

/**
 * The `sh` blocks tests take, by `file\0heading`, read from their sources: `docSection(f, h)` and
 * `docBlocks(f, h)` kept whole (mapped, looped over, passed on) take all; `docBlocks(f, h)[2]` takes
 * the third; `const [a, , c] = docBlocks(f, h)` the first and the third (`...rest` the rest too).
 * Blocks of another language (`docBlocks(f, h, 'js')`) take no `sh` block; a language given as a
 * variable takes them all.
 */
export function takenBlocks (sources: string[]): Map<string, Taken> {
  const out = new Map<string, Taken>()
  const take = (key: string, taken: Taken): void => {
    const had = out.get(key)
    if (had === 'all' || taken === 'all') { out.set(key, 'all'); return }
    out.set(key, new Set([...(had ?? []), ...taken]))
  }
  for (const source of sources) {
    for (const m of source.matchAll(/doc(Blocks|Section)\('([^']+)', '((?:[^'\\]|\\.)+)'(?:, ([^)]+))?\)(?:\[(\d+)\])?/g)) {
      const [, kind, file, heading, lang, index] = m as unknown as [string, string, string, string, string | undefined, string | undefined]
      const key = `${file}\0${heading.replaceAll("\\'", "'")}`
      if (kind === 'Section') { take(key, 'all'); continue }
      if (lang !== undefined && /^'[^']*'$/.test(lang.trim()) && lang.trim() !== "'sh'") continue
      if (index !== undefined) { take(key, new Set([Number(index)])); continue }
      const destructured = /const \[([^\]]*)\] = \(?$/.exec(source.slice(Math.max(0, (m.index ?? 0) - 80), m.index))?.[1]
      if (destructured === undefined || lang !== undefined) { take(key, 'all'); continue }
      const names = destructured.split(',').map((n) => n.trim())
      if (names.some((n) => n.startsWith('...'))) { take(key, 'all'); continue }
      take(key, new Set(names.flatMap((n, k) => n === '' ? [] : [k])))
    }
  }
  return out
}

/** The test sources under `dir`. */
function testSources (dir = join(ROOT, 'test')): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => readFileSync(join(entry.parentPath, entry.name), 'utf8'))
}

/** The `sh` blocks of `pages` that no test takes and that do not say why: `page:line: heading`. */
export function unrunBlocks (taken: Map<string, Taken>, pageList = pages().filter((p) => p === 'README.md' || p.startsWith('docs/')), read: (path: string) => string = (p) => readFileSync(join(ROOT, p), 'utf8')): string[] {
  const out: string[] = []
  for (const page of pageList) {
    const lines = read(page).split('\n')
    const headings: string[] = []
    // per heading level: the sh blocks seen since that heading, which is the next one's place in its section
    const seen: number[] = []
    let fenced = false
    lines.forEach((line, i) => {
      if (line.startsWith('```')) {
        if (!fenced && line === '```sh') {
          const covered = headings.some((h, level) => {
            const t = taken.get(`${page}\0${h}`)
            return t === 'all' || (t?.has(seen[level] ?? 0) ?? false)
          })
          const excused = /^<!-- not run: .+ -->$/.test(lines[i - 1] ?? '') || /^<!-- not run: .+ -->$/.test(lines[i - 2] ?? '')
          if (!covered && !excused) out.push(`${page}:${i + 1}: ${headings.at(-1) ?? '(top)'}`)
          for (let level = 0; level < headings.length; level++) seen[level] = (seen[level] ?? 0) + 1
        }
        fenced = !fenced
        return
      }
      const level = fenced ? undefined : /^(#{1,6}) /.exec(line)?.[1]?.length
      if (level !== undefined) {
        headings.splice(level - 1)
        headings[level - 1] = line
        seen.splice(level - 1)
        seen[level - 1] = 0
      }
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
  const taken = takenBlocks(testSources())
  t.equal(taken.get('docs/task-graph-and-bus.md\0### Walkthrough: review a new agent'), 'all', 'the tests\' sections are found')
  t.same(unrunBlocks(taken), [])
  t.not(unrunBlocks(new Map()).length, 0, 'with no test, blocks are found unrun')
})

// a section whose tests took one block of three counted all three as run
t.test('a block is run only when a test takes it: by its place in the section, by destructuring, or with the whole section', async (t) => {
  const page = ['# Page', '', '## Three', '', '```sh', 'one', '```', '', '```json', '{}', '```', '', '```sh', 'two', '```', '', '### Deeper', '', '```sh', 'three', '```', '',
    '## Alone', '', '<!-- not run: it needs a cloud account -->', '```sh', 'four', '```', ''].join('\n')
  const unrun = (sources: string[]): string[] => unrunBlocks(takenBlocks(sources), ['docs/x.md'], () => page)
  t.same(unrun([]), ['docs/x.md:5: ## Three', 'docs/x.md:13: ## Three', 'docs/x.md:19: ### Deeper'], 'none taken (the excused one never counts)')
  t.same(unrun(["const [, second] = docBlocks('docs/x.md', '## Three')"]), ['docs/x.md:5: ## Three', 'docs/x.md:19: ### Deeper'], 'the second sh block (the json one is not counted)')
  t.same(unrun(["const x = (docBlocks('docs/x.md', '## Three')[2] as string)"]), ['docs/x.md:5: ## Three', 'docs/x.md:13: ## Three'], 'the third, in the subsection')
  t.same(unrun(["const [first] = docBlocks('docs/x.md', '## Three')", "const [deeper] = docBlocks('docs/x.md', '### Deeper')"]), ['docs/x.md:13: ## Three'], 'the first, and the subsection\'s own first')
  t.same(unrun(["for (const b of docBlocks('docs/x.md', '## Three')) run(b)"]), [], 'kept whole: all')
  t.same(unrun(["docSection('docs/x.md', '# Page')"]), [], 'the whole page')
  t.same(unrun(["const [a, ...rest] = docBlocks('docs/x.md', '## Three')"]), [], 'and the rest')
  t.same(unrun(["const [js] = docBlocks('docs/x.md', '## Three', 'js')"]), unrun([]), 'another language\'s blocks take no sh block')
  t.same(unrun(["const blocks = (lang: string) => docBlocks('docs/x.md', '## Three', lang)"]), [], 'a language given as a variable takes them all')
})
