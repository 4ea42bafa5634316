import t from 'tap'
import { execFile } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ESLint } from 'eslint'
import ts from 'typescript'
import { main } from '../src/commands.js'
import type { Teardown } from './helper.js'
import { harnessFreeEnv } from './child-env.js'
import { docBlocks, runShell } from './docs/doc-blocks.js'

// Issue 17: `agent-host new agent NAME` must make a working agent of each style, and a test for it
// that passes as generated. Each style is generated into a temporary project (the repository's src/,
// test helpers and node_modules linked in), then linted, typechecked, and its test run by tap in a
// child process.

const ROOT = fileURLToPath(new URL('../', import.meta.url))

/** A temporary agent-host project: src/, node_modules and .taprc linked to the repository's, test helpers, package.json (none: null). */
function project (t: Teardown, packageJson: unknown = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))): string {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-scaffold-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  symlinkSync(join(ROOT, 'src'), join(dir, 'src'), 'dir')
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir')
  mkdirSync(join(dir, 'test'))
  for (const helper of ['helper.ts', 'sse.ts', 'measure']) symlinkSync(join(ROOT, 'test', helper), join(dir, 'test', helper))
  // the project's tap configuration (its TypeScript loader): a project made from this repository has it
  symlinkSync(join(ROOT, '.taprc'), join(dir, '.taprc'))
  if (packageJson !== null) writeFileSync(join(dir, 'package.json'), JSON.stringify(packageJson))
  return dir
}

/** `agent-host new ...` in `cwd`: its exit code and what it printed. */
async function scaffold (cwd: string | undefined, args: string[], env: Record<string, string> = {}): Promise<{ code: number, out: string, err: string }> {
  const out: string[] = []
  const err: string[] = []
  const code = await main(['new', ...args], env, { out: (l) => { out.push(l) }, err: (l) => { err.push(l) }, ...(cwd !== undefined ? { cwd } : {}) })
  return { code, out: out.join('\n'), err: err.join('\n') }
}

/** `agent-host new ...` in `cwd` (`args` after `new`) as `src/cli.ts` runs it: what it printed; a failure throws. */
async function scaffoldOut (cwd: string, args: string[]): Promise<string> {
  const { code, out, err } = await scaffold(cwd, args, { USER: 'ada' })
  if (code !== 0) throw new Error(`agent-host ${args.join(' ')} exited ${code}: ${err}`)
  return out
}

/** Run a command; its exit code and output, never a rejection. */
async function run (command: string, args: string[], cwd: string): Promise<{ code: number, output: string }> {
  const env = harnessFreeEnv()
  return await new Promise((resolve) => {
    execFile(command, args, { cwd, env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, output: `${stdout}${stderr}` })
    })
  })
}

/**
 * Type-check the files under `folders` of the project `dir` with the repository's compiler options,
 * as `tsc` would: their errors (and the configuration's), not src/'s, which are `npm run
 * typecheck`'s. Checking only these files lets the checker skip the rest of src/ (tsc -p checked
 * all of it, some 20 s of CPU).
 */
function typeCheck (dir: string, folders: string[]): { files: string[], errors: string[] } {
  const { config } = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile) as { config: { compilerOptions: Record<string, unknown> } }
  const { rootDir: _rootDir, outDir: _outDir, ...compilerOptions } = config.compilerOptions
  const parsed = ts.parseJsonConfigFileContent({ compilerOptions: { ...compilerOptions, noEmit: true }, include: folders }, ts.sys, dir)
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options })
  const generated = program.getSourceFiles().filter((file) => folders.some((folder) => file.fileName.startsWith(`${dir}/${folder}/`)))
  const diagnostics = [
    ...parsed.errors,
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...generated.flatMap((file) => [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)])
  ]
  const host = { getCanonicalFileName: (f: string) => f, getCurrentDirectory: () => dir, getNewLine: () => '\n' }
  return { files: generated.map((file) => file.fileName.slice(dir.length + 1)), errors: diagnostics.map((d) => ts.formatDiagnostic(d, host).trim()) }
}

const STYLES = [
  { name: 'greeter', flags: [], made: 'a JSON agent (request_response)' },
  { name: 'reverser', flags: ['--stream'], made: 'an SSE agent (server_sent_events)' },
  { name: 'number-stats', flags: ['--task'], made: 'a task agent of type "number-stats"' },
  { name: 'text-report', flags: ['--contract'], made: 'a contract agent (seed 003), also a task agent' }
] as const

/**
 * The commands of docs/writing-agents.md's scaffold section: `npm run dev` (test/layout/dev-mode.test.ts
 * runs it), the four `new agent` lines (one per style) and the generated test's tap command.
 */
function guideCommands (): { newAgent: string[], tap: string } {
  const lines = docBlocks('docs/writing-agents.md', '## Scaffold an agent, then run it in dev mode').flatMap((block) => block.trimEnd().split('\n'))
  const commands = lines.map((line) => line.replace(/#.*$/, '').trim())
  return { newAgent: commands.filter((c) => c.startsWith('npx tsx src/cli.ts new agent ')), tap: commands.find((c) => c.startsWith('npx tap ')) ?? 'no tap command' }
}

// the guide's commands, pasted in the project's root: each style's `new agent` line, then (with the
// other generated tests in the same run) the tap command it and the scaffold print
t.test('every style is made lint-clean and typed by the guide\'s commands, and its generated test passes under tap', { timeout: 170_000 }, async (t) => {
  const dir = project(t)
  const made: string[] = []
  let printed: string[] | undefined
  const guide = guideCommands()
  t.same(guide.newAgent, STYLES.map((style) => ['npx tsx src/cli.ts new agent', style.name, ...style.flags].join(' ')), 'the guide makes one agent of each style')
  for (const [i, style] of STYLES.entries()) {
    const line = guide.newAgent[i] as string
    // the first line runs as pasted (npx, tsx, the CLI's entry); the others are the same command with
    // other arguments, given to the CLI's main() here (each npx tsx cost some 2.5 s of CPU)
    const out = i === 0 ? await runShell(line, { cwd: dir }) : await scaffoldOut(dir, line.split(' ').slice(4))
    const id = /id ([0-9a-f-]{36}):/.exec(out)?.[1]
    t.match(out, `made ${style.made}`)
    t.match(out, `agents/${style.name}/index.ts\n  test/agents/${style.name}.test.ts`)
    t.match(out, `npx tap --disable-coverage test/agents/${style.name}.test.ts`)
    printed ??= /^ {2}npx tap (.*) test\/agents\//m.exec(out)?.[1]?.split(' ')
    t.match(out, style.name === 'number-stats' ? `curl -s http://127.0.0.1:3000/v1/tasks/${style.name}-1` : `"agent_id":"${id ?? 'no id printed'}"`, 'the curl calls the new agent')
    t.match(readFileSync(join(dir, 'agents', style.name, 'index.ts'), 'utf8'), style.name === 'number-stats' ? `readonly agentType = '${style.name}'` : `id: '${id ?? ''}'`)
    made.push(`test/agents/${style.name}.test.ts`)
  }
  // AGENTS_DIR inside the project but not agents/: the agent goes there, its test loads that folder
  const elsewhere = await scaffold(dir, ['agent', 'far-greeter'], { AGENTS_DIR: 'lib/agents', USER: 'Ada O\'Hara "the first"' })
  t.equal(elsewhere.code, 0, elsewhere.err)
  t.match(elsewhere.out, 'lib/agents/far-greeter/index.ts')
  t.match(elsewhere.out, 'note: npm run build compiles only agents/, so npm start does not serve lib/agents/')
  t.match(readFileSync(join(dir, 'lib/agents/far-greeter/index.ts'), 'utf8'), 'from \'../../../src/agents/index.js\'')
  t.match(readFileSync(join(dir, 'test/agents/far-greeter.test.ts'), 'utf8'), 'new URL(\'../../lib/agents/\', import.meta.url)')
  made.push('test/agents/far-greeter.test.ts')

  t.equal(guide.tap, `npx tap ${(printed ?? []).join(' ')} test/agents/greeter.test.ts`, 'the guide\'s tap command is the one the scaffold printed')
  // the command the scaffold printed, as an author runs it (with the project's .taprc and its coverage gate)
  const tap = run('npx', ['tap', ...(printed ?? []), '--reporter=tap', ...made], dir)
  const checked = typeCheck(dir, ['agents', 'lib', 'test/agents'])
  const lint = await new ESLint({ cwd: dir, overrideConfigFile: join(ROOT, 'eslint.config.js') }).lintFiles(['agents', 'lib', 'test/agents'])
  t.equal(checked.files.length, made.length * 2, `every generated file was typechecked: ${checked.files.join(', ')}`)
  t.same(checked.errors, [], 'the generated files typecheck')
  const { code, output } = await tap
  for (const file of made) t.match(output, new RegExp(`^ok \\d+ - ${file} #`, 'm'), `${file} passes`)
  t.equal(code, 0, 'tap passes')
  t.equal(lint.length, made.length * 2, 'every generated file was linted')
  t.same(lint.filter((r) => r.messages.length > 0).map((r) => ({ file: r.filePath, messages: r.messages.map((m) => `${m.line}: ${m.message}`) })), [], 'lint-clean')
})

t.test('--contract --task is a contract agent (it works the task graph anyway); the usage names new agent', async (t) => {
  const dir = project(t)
  const both = await scaffold(dir, ['agent', 'both', '--contract', '--task'])
  t.equal(both.code, 0, both.err)
  t.match(both.out, 'made a contract agent')
  t.match(readFileSync(join(dir, 'agents/both/index.ts'), 'utf8'), 'defineContractAgent({')
  t.match(readFileSync(join(dir, 'agents/both/index.ts'), 'utf8'), 'author: \'me\'', 'the author is "me" when USER is not set')
  const help: string[] = []
  t.equal(await main(['--help'], {}, { out: (l) => { help.push(l) }, err: () => {} }), 0)
  t.match(help.join('\n'), 'new agent NAME [--stream | --task | --contract]')
})

t.test('the serve step is npm run dev when the project has that script, else tsx', async (t) => {
  for (const [packageJson, serve] of [[{ scripts: { dev: 'tsx src/server.ts' } }, 'npm run dev'], [{ name: 'no-scripts' }, 'npx tsx src/server.ts'], [null, 'npx tsx src/server.ts']] as const) {
    const dir = project(t, packageJson)
    const made = await scaffold(dir, ['agent', 'greeter'])
    t.equal(made.code, 0, made.err)
    t.match(made.out, `\n  ${serve}\n`, JSON.stringify(packageJson))
  }
})

t.test('the addresses it prints are the port the server started from this shell listens on: PORT, else 3000', async (t) => {
  for (const [env, port] of [[{ PORT: '4100' }, 4100], [{}, 3000], [{ PORT: 'abc' }, 3000], [{ PORT: '0' }, 3000]] as const) {
    for (const style of [[], ['--task']]) {
      const made = await scaffold(project(t), ['agent', 'greeter', ...style], env)
      t.equal(made.code, 0, made.err)
      t.match(made.out, `# serve it on http://127.0.0.1:${port} `, JSON.stringify(env))
      const urls = made.out.match(/http:\/\/127\.0\.0\.1:\d+/g) ?? []
      t.ok(urls.length >= 2 && urls.every((u) => u === `http://127.0.0.1:${port}`), `every address says ${port}: ${urls.join(' ')}`)
    }
  }
})

t.test('refused: a name that is not lower-case kebab case, a wrong command line, contradictory flags', async (t) => {
  const dir = project(t)
  for (const name of ['Greeter', 'greeter_bot', 'greeter bot', 'greeter-', 'greet--er', '1greeter', '.greeter', '_shared', 'a'.repeat(65)]) {
    const { code, err } = await scaffold(dir, ['agent', name])
    t.equal(code, 2, name)
    t.match(err, `agent name "${name}" must be lower-case kebab case: a letter, then letters, digits and single hyphens, at most 64 characters`)
  }
  t.equal((await scaffold(undefined, ['agent', 'Bad'])).code, 2, 'the name is checked before the folder')
  for (const args of [['agent'], ['thing', 'greeter'], [], ['agent', 'one', 'two']]) {
    t.match(await scaffold(dir, args), { code: 2, err: /^usage: agent-host new agent NAME \[--stream \| --task \| --contract\]$/ }, args.join(' '))
  }
  t.match(await scaffold(dir, ['agent', 'x', '--contract', '--stream']), { code: 2, err: /--contract and --stream do not combine: a contract agent answers with one AgentOutput/ })
  t.match(await scaffold(dir, ['agent', 'x', '--task', '--stream']), { code: 2, err: /--task and --stream do not combine: a task agent answers the task graph, not a client/ })
  t.match(await scaffold(dir, ['agent', 'x', '--task', '--stream', '--contract']), { code: 2, err: /do not combine/ })
  t.match(await scaffold(dir, ['agent', 'x', '--shiny']), { code: 2, err: /Unknown option '--shiny'/ })
  t.notOk(existsSync(join(dir, 'agents')), 'nothing was written')
})

t.test('refused: outside a project, AGENTS_DIR outside the project', async (t) => {
  const empty = mkdtempSync(join(tmpdir(), 'agent-host-scaffold-'))
  t.teardown(() => { rmSync(empty, { recursive: true, force: true }) })
  t.match(await scaffold(empty, ['agent', 'greeter']), { code: 2, err: `${empty} is not the root of an agent-host project (it has no src/agents/index.ts)` })
  const dir = project(t)
  t.match(await scaffold(dir, ['agent', 'greeter'], { AGENTS_DIR: empty }), { code: 2, err: `AGENTS_DIR is ${empty}, outside this project (${dir})` })
  t.match(await scaffold(dir, ['agent', 'greeter'], { AGENTS_DIR: '../elsewhere' }), { code: 2, err: /outside this project/ })
  t.notOk(existsSync(join(dir, 'test', 'agents')), 'nothing was written')
})

t.test('never overwrites: an agent folder or a test already there refuses the name', async (t) => {
  const dir = project(t)
  t.equal((await scaffold(dir, ['agent', 'greeter'])).code, 0)
  const agent = join(dir, 'agents/greeter/index.ts')
  const test = join(dir, 'test/agents/greeter.test.ts')
  writeFileSync(agent, '// mine\n')
  t.match(await scaffold(dir, ['agent', 'greeter', '--stream']), { code: 1, err: 'agents/greeter and test/agents/greeter.test.ts already there: agent-host new never overwrites (pick another name, or remove them first)' })
  t.equal(readFileSync(agent, 'utf8'), '// mine\n', 'the agent is untouched')
  rmSync(join(dir, 'agents/greeter'), { recursive: true })
  const before = readFileSync(test, 'utf8')
  t.match(await scaffold(dir, ['agent', 'greeter']), { code: 1, err: 'test/agents/greeter.test.ts already there: agent-host new never overwrites (pick another name, or remove it first)' })
  t.equal(readFileSync(test, 'utf8'), before, 'the test is untouched')
  t.notOk(existsSync(join(dir, 'agents/greeter')), 'and no agent was made without its test')
  rmSync(test)
  mkdirSync(join(dir, 'agents/empty'))
  t.match(await scaffold(dir, ['agent', 'empty']), { code: 1, err: /^agents\/empty already there/ }, 'an empty folder counts')
})
