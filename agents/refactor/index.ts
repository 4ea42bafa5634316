import { randomUUID } from 'node:crypto'
import { readFile, realpath, rename, rm, stat, writeFile } from 'node:fs/promises'
import { basename, dirname, join, relative } from 'node:path'
import { FILE_HEADERS_ONLY, formatPatch, structuredPatch } from 'diff'
import { defineContractAgent, type AgentOutput, type AgentProtocol, type ContractCapability, type JsonObject } from '../../src/agents/index.js'
import { compileSchema } from '../../src/agents/json-schema.js'
import {
  PlanTask, RefactorAgentInput, RefactorAgentOutput, type ChangedFile
} from '../../src/protocol/contract.js'
import { editable, locate, undocumentedExport, type UndocumentedExport } from '../_shared/code-scan.js'

/** What to change, from either form of the input. */
interface Request {
  task: PlanTask
  files: string[]
  changeType: string
  styleGuide?: string
}

/** A file's new text and what changed in it; a string is why no new text could be made. */
type Edit = (path: string, text: string) => Promise<{ text: string, summary: string } | string>

/** The change a plan task's type asks for. */
const CHANGE_TYPE: Record<string, string> = { document: 'add_docstrings', simplify: 'refactor', resolve_todo: 'resolve_todo', test: 'add_tests' }
const INSTRUCTION: Record<string, string> = {
  add_docstrings: 'Add a JSDoc comment to each exported function and class that lacks one.',
  add_types: 'Add precise TypeScript types where they are missing.',
  refactor: 'Simplify the code: split long functions into short, well-named ones, without changing what it does.',
  optimize: 'Make the code faster without changing what it does.',
  resolve_todo: 'Resolve the TODO, FIXME and XXX comments: do what they ask, then remove them.',
  add_tests: 'Add tests for the behaviour this file does not test yet.'
}
const SYSTEM = 'You change one source file at a time, carefully, keeping its style. You answer with the complete new content of the file in one fenced code block, and nothing else.'
const validOutput = compileSchema<RefactorAgentOutput>(RefactorAgentOutput)
const json = (schema: unknown): JsonObject => JSON.parse(JSON.stringify(schema)) as JsonObject
const INPUTS: JsonObject = { anyOf: [json(RefactorAgentInput), { type: 'object', properties: { task: json(PlanTask) }, required: ['task'], additionalProperties: false }] }

function requestOf (payload: JsonObject): Request {
  const input = payload as Partial<RefactorAgentInput> & { task: PlanTask }
  return {
    task: input.task,
    files: input.target_files ?? input.task.input_artifacts,
    changeType: input.change_type ?? CHANGE_TYPE[input.task.type] ?? 'refactor',
    ...(input.style_guide !== undefined ? { styleGuide: input.style_guide } : {})
  }
}

/** `parseConfig` → `parse`, `config`; acronyms (`URL`) stay as they are. */
function wordsOf (name: string): string[] {
  return name.replace(/([a-z0-9])([A-Z])/g, '$1 $2').replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2').split(/[\s_]+/)
    .filter((w) => w !== '')
    .map((w) => w.length > 1 && w === w.toUpperCase() ? w : w.toLowerCase())
}

/** A first sentence from the name: `parseConfig` → `Parse config.`, a class `TaskStore` → `A task store.` */
function summaryOf (found: UndocumentedExport): string {
  const phrase = wordsOf(found.name).join(' ') || found.name
  if (found.kind === 'class') return `${/^[aeiou]/i.test(phrase) ? 'An' : 'A'} ${phrase}.`
  return `${phrase.charAt(0).toUpperCase()}${phrase.slice(1)}.`
}

/** `text` cut at the commas outside brackets, braces, parentheses and type arguments. */
function splitTopLevel (text: string): string[] {
  const parts = ['']
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string
    if ('([{<'.includes(ch)) depth++
    else if (')]}'.includes(ch) || (ch === '>' && text[i - 1] !== '=')) depth--
    if (ch === ',' && depth === 0) parts.push('')
    else parts[parts.length - 1] += ch
  }
  return parts
}

/** A parameter's name for `@param`: destructured ones are `options`; `this` is no parameter. */
function paramName (param: string): string | undefined {
  const p = param.trim()
  if (/^[{[]/.test(p)) return 'options'
  const name = /^(?:\.\.\.)?([A-Za-z_$][\w$]*)/.exec(p)?.[1]
  return name === 'this' ? undefined : name
}

/** Where the parenthesis opened at `open` closes on this line, or -1. */
function closingParen (line: string, open: number): number {
  let depth = 0
  for (let i = open; i < line.length; i++) {
    if (line[i] === '(') depth++
    else if (line[i] === ')' && --depth === 0) return i
  }
  return -1
}

/** The parameters and whether a non-void return type shows, from a signature on one line (none when it spans lines). */
function signatureOf (line: string, found: UndocumentedExport): { params: string[], returns: boolean } {
  const declared = new RegExp(`\\bfunction\\s+${found.name}\\b`).exec(line)
  const open = declared === null ? -1 : line.indexOf('(', declared.index + declared[0].length)
  const close = open < 0 ? -1 : closingParen(line, open)
  if (close < 0) return { params: [], returns: false }
  const params = splitTopLevel(line.slice(open + 1, close)).map(paramName).filter((p): p is string => p !== undefined)
  const type = /^\s*:\s*(.*?)\s*\{?\s*$/.exec(line.slice(close + 1))?.[1]
  return { params, returns: type !== undefined && !/^(void|Promise<void>|never|undefined)$/.test(type) }
}

/** The JSDoc skeleton for an export, indented like its declaration. */
function skeleton (line: string, found: UndocumentedExport): string[] {
  const indent = line.slice(0, line.length - line.trimStart().length)
  const { params, returns } = signatureOf(line, found)
  return [`${indent}/**`, `${indent} * ${summaryOf(found)}`, ...params.map((p) => `${indent} * @param ${p}`), ...(returns ? [`${indent} * @returns`] : []), `${indent} */`]
}

/** `text` with a JSDoc skeleton above each undocumented export (the same ones research reports); CRLF files stay CRLF. */
const addDocstrings: Edit = async (_path, text) => {
  const eol = text.includes('\r\n') ? '\r' : ''
  const lines = text.split('\n')
  const names: string[] = []
  const out = lines.flatMap((line, i) => {
    const found = undocumentedExport(lines, i)
    if (found === undefined) return [line]
    names.push(found.name)
    return [...skeleton(line.replace(/\r$/, ''), found).map((l) => l + eol), line]
  })
  return { text: out.join('\n'), summary: `JSDoc added to ${names.join(', ')}` }
}

/** The file's new text from the model: one fresh session per file, the answer's fenced code block. */
function modelEdit (llm: AgentProtocol, request: Request, signal: AbortSignal): Edit {
  const instruction = INSTRUCTION[request.changeType] ?? `Make this change: ${request.changeType}.`
  return async (path, text) => {
    const prompt = [
      instruction,
      `The task: ${request.task.description}`,
      ...(request.styleGuide !== undefined ? [`Follow this style guide:\n${request.styleGuide}`] : []),
      `Answer with the complete new content of ${path} in one fenced code block, and nothing else.`,
      `\`\`\`\n${text}\n\`\`\``
    ].join('\n\n')
    const sessionId = randomUUID()
    await llm.start({ sessionId, system: SYSTEM }, { signal })
    let answer: string
    try {
      answer = (await llm.send(sessionId, [{ role: 'user', content: prompt }], { signal })).content
    } finally {
      await llm.stop(sessionId)
    }
    // greedy: a file may hold fences of its own, so the block ends at the answer's last fence
    const block = /```[^\n]*\n([\s\S]*)```/.exec(answer)?.[1]
    if (block === undefined) return `the model gave no fenced code block for ${path}`
    const body = block.replace(/\n$/, '') + (text.endsWith('\n') ? '\n' : '')
    return { text: text.includes('\r\n') ? body.replace(/\r?\n/g, '\r\n') : body, summary: `${request.changeType} by ${llm.name}` }
  }
}

/** Replace `file` in one step: a temporary file beside it, renamed over it. */
async function writeAtomically (file: string, text: string): Promise<void> {
  const temp = join(dirname(file), `.${basename(file)}.${randomUUID()}.tmp`)
  try {
    await writeFile(temp, text, { mode: (await stat(file)).mode })
    await rename(temp, file)
  } finally {
    await rm(temp, { force: true })
  }
}

/** A file's change as a unified diff (`a/` and `b/` paths, 3 lines of context) with its line counts. */
function changedFile (path: string, before: string, after: string, summary: string): ChangedFile {
  const patch = structuredPatch(`a/${path}`, `b/${path}`, before, after, undefined, undefined, { context: 3 })
  const lines = patch.hunks.flatMap((h) => h.lines)
  return {
    path,
    diff: formatPatch(patch, FILE_HEADERS_ONLY),
    change_summary: summary,
    lines_added: lines.filter((l) => l.startsWith('+')).length,
    lines_removed: lines.filter((l) => l.startsWith('-')).length
  }
}

/** The target files' real paths, each once, or why one may not be touched. */
async function targetsOf (root: string, files: readonly string[]): Promise<Array<{ path: string, real: string }> | string> {
  const targets: Array<{ path: string, real: string }> = []
  for (const file of files) {
    const where = await locate(root, file)
    if (typeof where === 'string') return `target file ${file} is ${where === 'missing' ? 'missing' : `not inside ${root}`}`
    if (!editable(root, where.real)) return `target file ${file} is not a source file this agent may change (only .ts, .js and the like, outside node_modules, dist, data and hidden folders)`
    // one file named twice would be edited twice from the same text, the second edit undoing the first
    if (!targets.some((t) => t.real === where.real)) targets.push({ path: relative(root, where.real), real: where.real })
  }
  return targets
}

function outputOf (taskId: string, changed: ChangedFile[]): AgentOutput {
  const insertions = changed.reduce((n, f) => n + f.lines_added, 0)
  const deletions = changed.reduce((n, f) => n + f.lines_removed, 0)
  const content: RefactorAgentOutput = {
    changed_files: changed,
    tests_added: [],
    docs_updated: [],
    pr_url: null,
    diff_stats: { files_changed: changed.length, insertions, deletions, test_coverage_delta: 0, complexity_delta: 0 }
  }
  return {
    task_id: taskId,
    status: 'ok',
    artifacts: [{ kind: 'diff', ref: `refactor/${taskId}.patch`, content }],
    metrics: { files_changed: changed.length, insertions, deletions },
    events: [{ type: 'code.changed', key: `code:${taskId}`, data: { files: changed.map((f) => f.path), pr_url: null }, visibility: 'a2a' }]
  }
}

const modelCapability = (name: string, intent: string, description: string): ContractCapability =>
  ({ name, description, intent, timeout_ms: 300_000, inputs: INPUTS, backends: ['llm'] })

/**
 * Refactor (seed 003's refactor agent): changes files of the server's working directory and returns
 * each change as a unified diff. `add_docstrings` (a plan's `document` tasks) is deterministic: it
 * puts a JSDoc skeleton (a sentence from the name, `@param`s, `@returns`) above every exported
 * function and class research would report, and a second run changes nothing. `refactor`,
 * `simplify`, `resolve_todo` and `add_tests` (the plan's other task types) ask the LLM backend for
 * each file's new content, a fresh session per file. Every file is edited first and only then
 * written, each atomically; the diffs come in a diff artifact and a `code.changed` event. It takes
 * the seed's input or a plan task (`{ task }`: its input artifacts, the change its type asks for).
 */
export default defineContractAgent({
  metadata: { id: '8a1f7d2e-3c4b-4e5f-9a6b-0c1d2e3f4a12', name: 'refactor', version: '1.0.0', author: 'agent-host', created_at: '2026-11-25T00:00:00.000Z' },
  contractVersion: '2.0.0',
  capabilities: [
    { name: 'add_docstrings', description: 'Add JSDoc skeletons to undocumented exports, without an LLM', intent: 'document', timeout_ms: 60_000, inputs: INPUTS },
    modelCapability('refactor', 'refactor', 'Rewrite files with the LLM as the change type asks (refactor, add_types, optimize, ...)'),
    modelCapability('simplify', 'simplify', 'Split long functions with the LLM'),
    modelCapability('resolve_todo', 'resolve_todo', 'Resolve TODO comments with the LLM'),
    modelCapability('add_tests', 'test', 'Add tests with the LLM')
  ],
  getCapabilities: () => ({ change_types: Object.keys(INSTRUCTION), deterministic: ['add_docstrings'] }),
  async execute (input, { signal, log, host }) {
    const request = requestOf(input.payload)
    const root = await realpath(process.cwd())
    const targets = await targetsOf(root, request.files)
    if (typeof targets === 'string') return { task_id: input.task_id, status: 'fail', error: targets }
    const edit = input.intent === 'document' ? addDocstrings : modelEdit(host.backend('llm'), request, signal)
    const edits = []
    for (const target of targets) {
      const before = await readFile(target.real, 'utf8')
      const after = await edit(target.path, before)
      if (typeof after === 'string') return { task_id: input.task_id, status: 'retry', error: after }
      if (after.text !== before) edits.push({ ...target, before, ...after })
    }
    signal.throwIfAborted()
    for (const e of edits) await writeAtomically(e.real, e.text)
    await log('info', `${edits.length} of ${targets.length} files changed`)
    return outputOf(input.task_id, edits.map((e) => changedFile(e.path, e.before, e.text, e.summary)))
  },
  validate: (output) => output.status !== 'ok' || validOutput(output.artifacts?.[0]?.content)
})
