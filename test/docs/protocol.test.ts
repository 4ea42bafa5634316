import t from 'tap'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { STATUS_CODES } from 'node:http'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { isDeepStrictEqual } from 'node:util'
import type { ValidateFunction } from 'ajv'
import type { FastifyInstance } from 'fastify'
import { createAjv, toIssues } from '../../src/agents/json-schema.js'
import { loadConfig } from '../../src/config.js'
import { ERROR_CATALOGUE, STREAM_ERROR_CODES } from '../../src/errors.js'
import { SSE_HEADERS } from '../../src/http/sse-writer.js'
import { ASSIST_ERROR_RESPONSES } from '../../src/protocol/openapi.js'
import type { StreamPacket } from '../../src/protocol/packets.js'
import { build } from '../helper.js'
import { until } from '../socket.js'
import { parseSse } from '../sse.js'

/*
 * docs/protocol.md is the wire contract users read; this test keeps it true.
 *
 * Examples are fenced blocks marked by an HTML comment on the line before the fence:
 *   <!-- schema: Name[, option: value ...] -->  before ```json: validated against the TypeBox schema
 *                                               `Name` exported from src/protocol/*.ts
 *   <!-- sse[, option ...] -->                  before ```text: a Server-Sent Events body
 * Options tie examples to the server (sent in document order to one freshly built app):
 *   request: L       (ServiceRequest) POST it; it must answer `status` (default 200); L names it
 *   status: N        the status the request must answer
 *   accept: V, last-event-id: V   headers sent with a request or an answer (uuids in last-event-id,
 *                    and in a request's body, are the document's: they are mapped to the ids the
 *                    server made, as an earlier answer showed them: an interrupt's id, say)
 *   cancel-after-packets: N      POST the request, cancel it once its run has made N packets
 *   answer: L        (ServiceResponse, ErrorBody, sse) POST request L again: the answer must equal
 *                    this example, up to uuids (consistently renamed), times and latencies
 *   get: /path       GET it: the answer must equal this example (same leeway)
 *   resumed          (sse) the body of a resume: seq need not start at 1
 * A ```json fence without a marker fails, and so does an unknown schema, an example that does
 * not validate, an SSE example that breaks the framing or the stream rules, an AH_ERR_ code the
 * catalogue lacks, a stream error code that does not exist, a relative link to a missing file, and a
 * curl command whose body is not one of the document's ServiceRequest examples.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const DOC_PATH = join(ROOT, 'docs/protocol.md')
const DOC_NAME = 'docs/protocol.md'
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi
const UUID_ONLY = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
const DATE_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/
const T_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
/** Numbers that differ from run to run. */
const VOLATILE_NUMBERS = new Set(['latency_ms', 'uptime_seconds'])
const OPTIONS = new Set(['request', 'status', 'accept', 'last-event-id', 'cancel-after-packets', 'answer', 'get', 'resumed'])
const SEVERITIES = new Set(['FATAL', 'TRANSIENT', 'WARNING'])

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

/** One marked example of the document. */
interface Example {
  line: number
  kind: 'schema' | 'sse'
  /** The schema name (kind `schema`). */
  schema: string
  options: Map<string, string>
  /** The fence's text, each line ending in a newline. */
  text: string
  /** The parsed JSON (kind `schema`). */
  value: Json
}

/** What a static check of the document found. */
interface Checked {
  problems: string[]
  examples: Example[]
  /** Paths of curl commands that only GET. */
  gets: string[]
}

// --- the schemas of src/protocol, and validators configured like the server's ---

function isSchema (value: unknown): value is object {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const v = value as { type?: unknown, anyOf?: unknown }
  return typeof v.type === 'string' || Array.isArray(v.anyOf)
}

const PROTOCOL_DIR = join(ROOT, 'src/protocol')
/** Every schema src/protocol exports, by export name, and whether clients send it (envelope.ts). */
const schemas = new Map<string, { schema: object, received: boolean }>()
for (const file of readdirSync(PROTOCOL_DIR).filter((f) => f.endsWith('.ts')).sort()) {
  const module = await import(pathToFileURL(join(PROTOCOL_DIR, file)).href) as Record<string, unknown>
  for (const [name, value] of Object.entries(module)) {
    if (isSchema(value)) schemas.set(name, { schema: value, received: file === 'envelope.ts' })
  }
}

// What clients send is checked as src/plugins/validation.ts checks bodies (no coercion, defaults
// filled), except that an unknown key is reported rather than dropped: in an example it is a typo.
// What the server emits is checked strictly: no coercion, no defaults.
const receivedAjv = createAjv({ coerceTypes: false, useDefaults: true })
const emittedAjv = createAjv({ coerceTypes: false, useDefaults: false })
const validators = new Map<string, ValidateFunction>()

function validatorOf (name: string): ValidateFunction | undefined {
  const entry = schemas.get(name)
  if (entry === undefined) return undefined
  let validate = validators.get(name)
  if (validate === undefined) {
    validate = (entry.received ? receivedAjv : emittedAjv).compile(entry.schema)
    validators.set(name, validate)
  }
  return validate
}

const catalogue = new Map(ERROR_CATALOGUE.map((e) => [e.code, e.statusCode]))
const streamCodes = new Set(Object.keys(STREAM_ERROR_CODES))
/** The codes an entry of ASSIST_ERROR_RESPONSES names: in its description, and as its examples' codes. */
function codesOf (entry: unknown): string[] {
  const { description, examples } = typeof entry === 'string' ? { description: entry, examples: [] } : entry as { description?: unknown, examples?: unknown }
  const codes = [...String(description ?? '').matchAll(/`(AH_ERR_[A-Z0-9_]+)`/g)].map((m) => m[1] as string)
  if (Array.isArray(examples)) for (const e of examples) if (typeof (e as { code?: unknown }).code === 'string') codes.push((e as { code: string }).code)
  return [...new Set(codes)]
}
/** The codes each status of ASSIST_ERROR_RESPONSES names. */
const assistErrors = new Map(Object.entries(ASSIST_ERROR_RESPONSES).map(([status, entry]) => [Number(status), codesOf(entry as unknown)]))

const config = loadConfig({})
const BASE_URL = `http://${config.HOST}:${config.PORT}`

// --- reading the document ---

interface Fence { line: number, lang: string, lines: string[], marker: { line: number, text: string } | undefined }

/** The fenced blocks of a markdown text, each with the marker comment on the line before it, if any. */
function fences (markdown: string, problems: string[]): Fence[] {
  const lines = markdown.split('\n')
  const found: Fence[] = []
  let pending: { line: number, text: string } | undefined
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string
    const comment = /^<!--\s*((?:schema:|sse\b).*?)\s*-->\s*$/.exec(line)
    if (comment !== null) {
      if (pending !== undefined) problems.push(`${DOC_NAME}:${pending.line}: marker is not followed by a fenced block`)
      pending = { line: i + 1, text: comment[1] as string }
      continue
    }
    const open = /^```(\S*)\s*$/.exec(line)
    if (open === null) {
      if (pending !== undefined && line.trim() !== '') {
        problems.push(`${DOC_NAME}:${pending.line}: marker is not followed by a fenced block`)
        pending = undefined
      }
      continue
    }
    const start = i
    const body: string[] = []
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i] as string); i++) body.push(lines[i] as string)
    if (i >= lines.length) problems.push(`${DOC_NAME}:${start + 1}: fence is never closed`)
    found.push({ line: start + 1, lang: open[1] as string, lines: body, marker: pending })
    pending = undefined
  }
  if (pending !== undefined) problems.push(`${DOC_NAME}:${pending.line}: marker is not followed by a fenced block`)
  return found
}

function parseMarker (marker: { line: number, text: string }, problems: string[]): { kind: 'schema' | 'sse', schema: string, options: Map<string, string> } {
  const [head = '', ...rest] = marker.text.split(',').map((s) => s.trim())
  const where = `${DOC_NAME}:${marker.line}`
  const schema = /^schema:\s*(\S+)$/.exec(head)?.[1] ?? ''
  const kind = head === 'sse' ? 'sse' : 'schema'
  if (kind === 'schema' && schema === '') problems.push(`${where}: a marker is "schema: <Name>" or "sse", not "${head}"`)
  const options = new Map<string, string>()
  for (const item of rest) {
    const m = /^([a-z-]+)(?::\s*(.+))?$/.exec(item)
    const key = m?.[1] ?? item
    if (m === null || !OPTIONS.has(key)) { problems.push(`${where}: unknown marker option "${item}"`); continue }
    options.set(key, m[2] ?? '')
  }
  return { kind, schema, options }
}

/** Check a marker's options against what they may go with. */
function checkOptions (example: Example, requests: Set<string>, problems: string[]): void {
  const where = `${DOC_NAME}:${example.line}`
  const o = example.options
  const isRequest = example.kind === 'schema' && example.schema === 'ServiceRequest'
  if (o.has('request')) {
    const label = o.get('request') as string
    if (!isRequest) problems.push(`${where}: "request" goes with schema: ServiceRequest`)
    if (requests.has(label)) problems.push(`${where}: request "${label}" is defined twice`)
    requests.add(label)
  }
  for (const key of ['status', 'cancel-after-packets']) {
    if (o.has(key) && !isRequest) problems.push(`${where}: "${key}" goes with schema: ServiceRequest`)
  }
  if (o.has('status') && !/^[1-5]\d\d$/.test(o.get('status') as string)) problems.push(`${where}: status must be an HTTP status`)
  if (o.has('cancel-after-packets') && !/^[1-9]\d*$/.test(o.get('cancel-after-packets') as string)) problems.push(`${where}: cancel-after-packets must be a positive integer`)
  if (o.has('answer')) {
    if (example.kind === 'schema' && !['ServiceResponse', 'ErrorBody'].includes(example.schema)) problems.push(`${where}: "answer" goes with sse, ServiceResponse or ErrorBody`)
    if (!requests.has(o.get('answer') as string)) problems.push(`${where}: answer to "${o.get('answer') ?? ''}", which no earlier request example defines`)
  }
  for (const key of ['accept', 'last-event-id']) {
    if (o.has(key) && !isRequest && !o.has('answer')) problems.push(`${where}: "${key}" goes with a request or an answer`)
  }
  if (o.has('get') && (example.kind !== 'schema' || isRequest || o.has('answer') || !(o.get('get') as string).startsWith('/'))) {
    problems.push(`${where}: "get: /path" goes with a schema example that is not a request or an answer`)
  }
  if (o.has('resumed') && (example.kind !== 'sse' || o.get('resumed') !== '')) problems.push(`${where}: "resumed" is a flag of sse examples`)
}

/** Rules for a resumed body: per stream `seq` goes up by one from wherever it starts; one CLOSE each; the main stream's last. */
function checkResumedRules (packets: StreamPacket[]): string | undefined {
  const last = packets.at(-1)
  if (last?.op !== 'CLOSE') return 'the last packet is not a CLOSE'
  const seqs = new Map<string, number>()
  const closed = new Set<string>()
  for (const p of packets) {
    const previous = seqs.get(p.stream_id)
    if (previous !== undefined && p.seq !== previous + 1) return `stream ${p.stream_id}: seq ${p.seq}, expected ${previous + 1}`
    if (closed.has(p.stream_id)) return `stream ${p.stream_id}: packet after CLOSE`
    if (p.op === 'CLOSE') closed.add(p.stream_id)
    seqs.set(p.stream_id, p.seq)
  }
  for (const id of seqs.keys()) if (!closed.has(id)) return `stream ${id} never closed`
  return undefined
}

/** Parse and check an SSE example (or a live SSE body). */
function readSse (text: string, resumed: boolean): { packets: StreamPacket[], retry: number | undefined } {
  if (!text.endsWith('\n\n')) throw new Error('the body does not end with the blank line that ends an event')
  const parsed = parseSse(text, !resumed)
  if (resumed) {
    const broken = checkResumedRules(parsed.packets)
    if (broken !== undefined) throw new Error(broken)
  }
  return { packets: parsed.packets, retry: parsed.retry }
}

function checkStreamCode (code: unknown, where: string, problems: string[]): void {
  if (typeof code !== 'string' || !streamCodes.has(code)) problems.push(`${where}: stream error code "${String(code)}" is not in STREAM_ERROR_CODES (src/errors.ts)`)
}

/** Checks beyond the schema: what the server's own rules say about the values. */
function checkValue (example: Example, problems: string[]): void {
  const where = `${DOC_NAME}:${example.line}`
  const v = example.value as Record<string, Json>
  switch (example.schema) {
    case 'StreamPacket':
      if (typeof v.t !== 'string' || !T_UTC.test(v.t)) problems.push(`${where}: t must be UTC with milliseconds`)
      if (v.op === 'ERROR') checkStreamCode((v.p as Record<string, Json>).code, where, problems)
      break
    case 'StreamError':
      checkStreamCode(v.code, where, problems)
      break
    case 'ServiceResponse': {
      const errors = (v.output as Record<string, Json>).errors
      if (Array.isArray(errors)) for (const e of errors) checkStreamCode((e as Record<string, Json>).code, where, problems)
      break
    }
    case 'ErrorBody': {
      const code = v.code as string
      const status = v.statusCode as number
      const own = catalogue.get(code)
      if (own === undefined) problems.push(`${where}: ${code} is not in src/errors.ts`)
      else if (own !== status && !(assistErrors.get(status) ?? []).includes(code)) problems.push(`${where}: ${code} is a ${own}, not a ${status}`)
      if (v.error !== STATUS_CODES[status]) problems.push(`${where}: error must be "${STATUS_CODES[status] ?? ''}" for ${status}`)
      const cause = (v.details as Record<string, Json> | undefined)?.error
      if (typeof cause === 'object' && cause !== null) checkStreamCode((cause as Record<string, Json>).code, where, problems)
      break
    }
  }
}

/** Rows of the markdown table whose header row is exactly `header`, as trimmed cells. */
function tableRows (markdown: string, header: string): string[][] {
  const lines = markdown.split('\n')
  const start = lines.findIndex((l) => l.trim() === header)
  if (start < 0) return []
  const rows: string[][] = []
  for (let i = start + 2; i < lines.length && (lines[i] as string).startsWith('|'); i++) {
    rows.push((lines[i] as string).split(/(?<!\\)\|/).slice(1, -1).map((c) => c.trim()))
  }
  return rows
}

/** The curl commands of a shell block (a command goes on over quoted newlines and `\` line ends). */
function curlCommands (text: string): string[] {
  const commands: string[] = []
  for (const m of text.matchAll(/(?:^|\n)[ \t]*curl /g)) {
    const start = (m.index ?? 0) + m[0].indexOf('curl')
    let quoted = false
    let end = start
    for (; end < text.length; end++) {
      const c = text[end]
      if (c === '\'') quoted = !quoted
      else if (c === '\n' && !quoted && text[end - 1] !== '\\') break
    }
    commands.push(text.slice(start, end))
  }
  return commands
}

/** Every static check of the document; the live checks need what it returns. */
function checkDocument (markdown: string): Checked {
  const problems: string[] = []
  const examples: Example[] = []
  const gets: string[] = []
  const requests = new Set<string>()
  const blocks = fences(markdown, problems)

  for (const fence of blocks) {
    const where = `${DOC_NAME}:${fence.line}`
    const text = fence.lines.map((l) => l + '\n').join('')
    if (fence.marker === undefined) {
      if (fence.lang === 'json') problems.push(`${where}: a \`\`\`json fence without a marker (<!-- schema: Name --> on the line before)`)
      if (/^data: \{/m.test(text)) problems.push(`${where}: an SSE example without <!-- sse --> on the line before`)
      continue
    }
    const { kind, schema, options } = parseMarker(fence.marker, problems)
    const example: Example = { line: fence.line, kind, schema, options, text, value: null }
    if (kind === 'sse') {
      if (fence.lang !== 'text') problems.push(`${where}: an sse example goes in a \`\`\`text fence`)
      try {
        const { packets } = readSse(text, options.has('resumed'))
        for (const p of packets) if (p.op === 'ERROR') checkStreamCode(p.p.code, where, problems)
      } catch (err) {
        problems.push(`${where}: SSE example: ${(err as Error).message}`)
      }
    } else {
      if (fence.lang !== 'json') problems.push(`${where}: a schema example goes in a \`\`\`json fence`)
      const validate = validatorOf(schema)
      if (validate === undefined) {
        problems.push(`${where}: unknown schema "${schema}" (not exported by src/protocol/*.ts)`)
      } else {
        try {
          example.value = JSON.parse(text) as Json
          if (!validate(structuredClone(example.value))) {
            problems.push(`${where}: example does not match ${schema}: ${toIssues(validate.errors).map((i) => `${i.path} ${i.message}`).join('; ')}`)
          } else {
            checkValue(example, problems)
          }
        } catch (err) {
          problems.push(`${where}: not JSON: ${(err as Error).message}`)
        }
      }
    }
    checkOptions(example, requests, problems)
    examples.push(example)
  }

  // curl commands: on the default address, and every body one of the request examples
  const envelopes = examples.filter((e) => e.schema === 'ServiceRequest').map((e) => e.value)
  for (const fence of blocks.filter((b) => b.lang === 'sh')) {
    for (const command of curlCommands(fence.lines.join('\n'))) {
      const where = `${DOC_NAME}:${fence.line}`
      const url = /(https?:\/\/[^\s'"\\]+)/.exec(command)?.[1]
      if (url === undefined || !url.startsWith(BASE_URL + '/')) {
        problems.push(`${where}: curl must call ${BASE_URL} (the default HOST and PORT): ${command.slice(0, 80)}`)
        continue
      }
      const body = /\s-d\s+'([^']*)'/.exec(command)?.[1]
      if (body !== undefined) {
        let parsed: unknown
        try {
          parsed = JSON.parse(body)
        } catch (err) {
          problems.push(`${where}: curl body is not JSON: ${(err as Error).message}`)
          continue
        }
        if (!envelopes.some((e) => isDeepStrictEqual(e, parsed))) problems.push(`${where}: curl body is not one of the ServiceRequest examples, so nothing checks it`)
      } else if (!/\s-X\s*[A-Z]/.test(command)) {
        gets.push(url.slice(BASE_URL.length))
      }
    }
  }

  // error codes: all real; the /v1/assist table has each with its status, both ways with ASSIST_ERROR_RESPONSES
  for (const [code] of markdown.matchAll(/AH_ERR_[A-Z0-9_]+/g)) {
    if (!catalogue.has(code)) problems.push(`${DOC_NAME}: ${code} is not in src/errors.ts`)
  }
  const table = tableRows(markdown, '| status | code | when |')
  if (table.length === 0) problems.push(`${DOC_NAME}: no "| status | code | when |" table of the errors of /v1/assist`)
  const rows = new Set<string>()
  for (const [status = '', cell = ''] of table) {
    const code = /^`(AH_ERR_[A-Z0-9_]+)`$/.exec(cell)?.[1]
    if (code === undefined) { problems.push(`${DOC_NAME}: error table row "${status} | ${cell}" does not name one code`); continue }
    const own = catalogue.get(code)
    if (own !== undefined && own !== Number(status) && !(assistErrors.get(Number(status)) ?? []).includes(code)) {
      problems.push(`${DOC_NAME}: error table: ${code} is a ${own}, not a ${status}`)
    }
    rows.add(`${status} ${code}`)
  }
  for (const [status, codes] of assistErrors) {
    for (const code of codes) if (!rows.has(`${status} ${code}`)) problems.push(`${DOC_NAME}: error table lacks ${status} ${code} (ASSIST_ERROR_RESPONSES)`)
  }

  // stream error codes: the table has every code the server has, with real severities
  const streamTable = tableRows(markdown, '| code | severity | on | when |')
  const listed = new Set<string>()
  for (const [cell = '', severity = ''] of streamTable) {
    const code = /^`([a-z0-9_]+)`$/.exec(cell)?.[1] ?? cell
    checkStreamCode(code, `${DOC_NAME}: stream error table`, problems)
    const given = [...severity.matchAll(/`([A-Z]+)`/g)].map((m) => m[1] as string)
    if (given.length === 0 || given.some((s) => !SEVERITIES.has(s))) problems.push(`${DOC_NAME}: stream error table: ${code} has severity "${severity}"`)
    listed.add(code)
  }
  for (const code of streamCodes) if (!listed.has(code)) problems.push(`${DOC_NAME}: the stream error table lacks ${code}`)

  // the SSE headers the writer sends
  for (const [name, value] of Object.entries(SSE_HEADERS)) {
    if (!markdown.toLowerCase().includes(`${name}: ${value}`.toLowerCase())) problems.push(`${DOC_NAME}: does not show the SSE header "${name}: ${value}"`)
  }

  // relative links lead to files in the repository
  for (const [, target = ''] of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/i.test(target) || target.startsWith('#')) continue
    const file = resolve(dirname(DOC_PATH), target.split('#')[0] as string)
    if (relative(ROOT, file).startsWith('..') || !existsSync(file)) problems.push(`${DOC_NAME}: link to ${target}, which is not a file of the repository`)
  }
  return { problems, examples, gets }
}

// --- the live checks ---

/** Replaces uuids by their order of first appearance, times by a mark, and run-dependent numbers. */
class Normaliser {
  readonly ids = new Map<string, string>()

  run (value: unknown, key = ''): unknown {
    if (typeof value === 'string') {
      if (UUID_ONLY.test(value)) {
        const id = value.toLowerCase()
        if (!this.ids.has(id)) this.ids.set(id, `<uuid ${this.ids.size + 1}>`)
        return this.ids.get(id)
      }
      return DATE_TIME.test(value) ? '<date-time>' : value
    }
    if (typeof value === 'number' && VOLATILE_NUMBERS.has(key)) return '<number>'
    if (Array.isArray(value)) return value.map((v) => this.run(v))
    if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.run(v, k)]))
    return value
  }
}

/** Where two values first differ, for the message. */
function firstDifference (a: unknown, b: unknown, path = ''): string {
  if (typeof a === 'object' && a !== null && typeof b === 'object' && b !== null) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)])
    for (const key of keys) {
      const x = (a as Record<string, unknown>)[key]
      const y = (b as Record<string, unknown>)[key]
      if (!isDeepStrictEqual(x, y)) return firstDifference(x, y, `${path}/${key}`)
    }
  }
  return `${path === '' ? '/' : path}: the document has ${JSON.stringify(a)}, the server ${JSON.stringify(b)}`
}

/**
 * Send the examples to `app`, in document order, and compare its answers with them. Returns the
 * problems found. `ids` collects which server id each of the document's ids stands for.
 */
async function checkLive (app: FastifyInstance, checked: Pick<Checked, 'examples' | 'gets'>, ids = new Map<string, string>()): Promise<string[]> {
  const problems: string[] = []
  const requests = new Map<string, Json>()
  const headersOf = (options: Map<string, string>): Record<string, string> => {
    const headers: Record<string, string> = {}
    const accept = options.get('accept')
    const cursor = options.get('last-event-id')
    if (accept !== undefined) headers.accept = accept
    if (cursor !== undefined) headers['last-event-id'] = cursor.replace(UUID, (id) => ids.get(id.toLowerCase()) ?? id)
    return headers
  }
  const compare = (where: string, documented: unknown, live: unknown): void => {
    const doc = new Normaliser()
    const server = new Normaliser()
    const a = doc.run(documented)
    const b = server.run(live)
    if (!isDeepStrictEqual(a, b)) { problems.push(`${where}: differs from the server's answer at ${firstDifference(a, b)}`); return }
    // one story: a document id stands for one server id throughout, and no two for the same
    const byMark = new Map([...server.ids].map(([id, mark]) => [mark, id]))
    for (const [id, mark] of doc.ids) {
      const actual = byMark.get(mark) as string
      const known = ids.get(id)
      const other = [...ids].find(([docId, serverId]) => serverId === actual && docId !== id)?.[0]
      if (known !== undefined && known !== actual) problems.push(`${where}: ${id} stands for ${actual} here, but for ${known} in an earlier example`)
      else if (other !== undefined) problems.push(`${where}: ${id} stands for ${actual}, which an earlier example calls ${other}`)
      else ids.set(id, actual)
    }
  }

  for (const example of checked.examples) {
    const where = `${DOC_NAME}:${example.line}`
    const o = example.options
    if (example.schema === 'ServiceRequest') {
      const label = o.get('request')
      if (label !== undefined) requests.set(label, example.value)
      // an answer to an interrupt names it by the document's id: sent with the one the server made
      const payload = JSON.parse(JSON.stringify(example.value).replace(UUID, (id) => ids.get(id.toLowerCase()) ?? id)) as Record<string, Json>
      if (label !== undefined) requests.set(label, payload)
      const pending = app.inject({ method: 'POST', url: '/v1/assist', payload, headers: headersOf(o) }).then((r) => r)
      const cancelAfter = o.get('cancel-after-packets')
      if (cancelAfter !== undefined) {
        const requestId = payload.request_id as string
        try {
          await until(`${where}: ${cancelAfter} packets`, () => (app.assist.registry.get(requestId)?.packets ?? 0) >= Number(cancelAfter))
          const cancelled = await app.inject({ method: 'POST', url: `/v1/assist/${requestId}/cancel` })
          if (cancelled.statusCode !== 202) problems.push(`${where}: cancel answered ${cancelled.statusCode}`)
        } catch (err) {
          problems.push(`${where}: ${(err as Error).message}`)
        }
      }
      const res = await pending
      const expected = Number(o.get('status') ?? 200)
      if (res.statusCode !== expected) problems.push(`${where}: the request answered ${res.statusCode}, not ${expected}: ${res.body.slice(0, 300)}`)
      continue
    }
    const path = o.get('get')
    if (path !== undefined) {
      const res = await app.inject({ method: 'GET', url: path })
      if (res.statusCode !== 200) problems.push(`${where}: GET ${path} answered ${res.statusCode}`)
      else compare(where, example.value, res.json())
      continue
    }
    const label = o.get('answer')
    if (label === undefined) continue
    const res = await app.inject({ method: 'POST', url: '/v1/assist', payload: requests.get(label) as Record<string, Json>, headers: headersOf(o) })
    const type = String(res.headers['content-type'])
    if (example.kind === 'sse') {
      if (res.statusCode !== 200 || !type.startsWith('text/event-stream')) { problems.push(`${where}: expected an SSE answer, got ${res.statusCode} ${type}`); continue }
      try {
        const resumed = o.has('resumed')
        compare(where, readSse(example.text, resumed), readSse(res.body, resumed))
      } catch (err) {
        problems.push(`${where}: the server's SSE answer: ${(err as Error).message}`)
      }
      continue
    }
    const status = example.schema === 'ErrorBody' ? (example.value as { statusCode: number }).statusCode : 200
    if (res.statusCode !== status || !type.startsWith('application/json')) { problems.push(`${where}: expected ${status} JSON, got ${res.statusCode} ${type}: ${res.body.slice(0, 300)}`); continue }
    compare(where, example.value, res.json())
  }

  for (const path of checked.gets) {
    const res = await app.inject({ method: 'GET', url: path })
    if (res.statusCode >= 400) problems.push(`${DOC_NAME}: curl GET ${path} answers ${res.statusCode}`)
  }
  return problems
}

// --- the tests ---

const markdown = readFileSync(DOC_PATH, 'utf8')
const checked = checkDocument(markdown)

t.test('docs/protocol.md: every example is marked, known and valid, and the tables match the code', async (t) => {
  t.strictSame(checked.problems, [], 'no problems')
  const names = new Set(checked.examples.map((e) => e.kind === 'sse' ? 'sse' : e.schema))
  for (const name of ['ServiceRequest', 'ServiceResponse', 'StreamPacket', 'PresentationEvent', 'StreamError', 'ErrorBody', 'AgentDefinition', 'sse']) {
    t.ok(names.has(name), `has a ${name} example`)
  }
  t.ok(checked.examples.some((e) => e.options.has('resumed')), 'has a resumed SSE example')
})

t.test('docs/protocol.md: its requests, sent to a built app, get the answers it shows', async (t) => {
  const app = await build(t)
  t.strictSame(await checkLive(app, checked), [], 'every answer as documented')
})

t.test('the static checks fail on a broken document', async (t) => {
  const mutations: Array<[string, (doc: string) => string, RegExp]> = [
    ['an unmarked json fence', (d) => d.replace('<!-- schema: ServiceResponse, answer: echo -->\n', ''), /json fence without a marker/],
    ['an unknown schema', (d) => d.replace('<!-- schema: StreamError -->', '<!-- schema: StreamErorr -->'), /unknown schema "StreamErorr"/],
    ['a request example that does not validate', (d) => d.replace('"tier": "free"', '"tier": 1'), /does not match ServiceRequest: \/context\/user\/tier/],
    ['a key the server never emits', (d) => d.replace('"status": "draft"', '"status": "draft", "colour": "blue"'), /does not match AgentDefinition/],
    ['a packet time that is not UTC', (d) => d.replace('"t":"2026-11-25T07:56:35.071Z","p":"hello "}\n```', '"t":"2026-11-25T08:56:35.071+01:00","p":"hello "}\n```'), /t must be UTC/],
    ['a bad SSE event line', (d) => d.replace('event: stream.packet\nid: 15c65f28', 'event: packet\nid: 15c65f28'), /bad event line/],
    ['an SSE id that is not the stream_id', (d) => d.replace('id: 15c65f28-e53e-4c2e-9974-9ad00cc05d4e\n', 'id: 4f3c8d9f-6831-42b6-a071-14043e0e0d53\n'), /differs from stream_id/],
    ['a gap in seq', (d) => d.replace('"seq":3,"op":"DELTA"', '"seq":4,"op":"DELTA"'), /seq 4, expected 3/],
    ['a response without its final CLOSE', (d) => d.replace('"seq":2,"op":"CLOSE","t":"2026-11-25T07:56:35.372Z","p":"done"', '"seq":2,"op":"DELTA","t":"2026-11-25T07:56:35.372Z","p":"done"'), /not CLOSE/],
    ['a resumed example with a gap', (d) => d.replace(/(resumed -->\n```text\n[^`]*?)"seq":4,"op":"DELTA"/, '$1"seq":5,"op":"DELTA"'), /seq 5, expected 4/],
    ['an SSE example without its last blank line', (d) => d.replace('"p":"aborted"}\n\n```', '"p":"aborted"}\n```'), /blank line/],
    ['an unmarked SSE example', (d) => d.replace('<!-- sse, answer: showcase -->\n', ''), /SSE example without/],
    ['an unknown marker option', (d) => d.replace('<!-- sse, answer: echo-stream -->', '<!-- sse, answr: echo-stream -->'), /unknown marker option "answr: echo-stream"/],
    ['an answer to an undefined request', (d) => d.replace('<!-- sse, answer: slow-echo -->', '<!-- sse, answer: slower-echo -->'), /no earlier request example defines/],
    ['an unknown AH_ERR_ code', (d) => d + '\nAH_ERR_NOT_A_CODE\n', /AH_ERR_NOT_A_CODE is not in src\/errors.ts/],
    ['an error body with the wrong status', (d) => d.replace('"statusCode": 406', '"statusCode": 400'), /AH_ERR_NOT_ACCEPTABLE is a 406, not a 400/],
    ['an error table row with the wrong status', (d) => d.replace('| 409 | `AH_ERR_REQUEST_CONFLICT`', '| 400 | `AH_ERR_REQUEST_CONFLICT`'), /error table: AH_ERR_REQUEST_CONFLICT is a 409, not a 400/],
    ['an error of ASSIST_ERROR_RESPONSES left out', (d) => d.replace(/^\| 503 \| `AH_ERR_OVERLOADED`.*\n/m, ''), /lacks 503 AH_ERR_OVERLOADED/],
    ['a stream error code left out', (d) => d.replace(/^\| `run_timeout` \|.*\n/m, ''), /stream error table lacks run_timeout/],
    ['a stream error code that does not exist', (d) => d.replace('"code": "run_timeout"', '"code": "run_timed_out"'), /"run_timed_out" is not in STREAM_ERROR_CODES/],
    ['a link out of the repository', (d) => d.replace('(../agents/README.md)', '(../shared/spec/CAP.md)'), /link to \.\.\/shared\/spec\/CAP\.md/],
    ['a curl body that is no example', (d) => d.replace('-d \'{\n  "request_id": "d0c5d0c5-0000-4000-8000-000000000001"', '-d \'{\n  "request_id": "d0c5d0c5-0000-4000-8000-000000000099"'), /curl body is not one of the ServiceRequest examples/],
    ['a curl command on another port', (d) => d.replace('curl -s http://127.0.0.1:3000/health', 'curl -s http://127.0.0.1:8080/health'), /curl must call/],
    ['an SSE header left out', (d) => d.replace('x-accel-buffering: no\n', ''), /x-accel-buffering/]
  ]
  for (const [name, mutate, expected] of mutations) {
    const broken = mutate(markdown)
    t.not(broken, markdown, `${name}: the mutation applies`)
    const found = checkDocument(broken).problems
    t.ok(found.some((p) => expected.test(p)), `${name}: reported`, { found, expected })
  }
})

t.test('the live checks fail when the server answers otherwise than documented', async (t) => {
  const app = await build(t)
  const request = checked.examples.find((e) => e.options.get('request') === 'echo')
  const answer = checked.examples.find((e) => e.options.get('answer') === 'echo' && e.schema === 'ServiceResponse')
  const mismatch = checked.examples.find((e) => e.options.get('request') === 'session-mismatch')
  if (request === undefined || answer === undefined || mismatch === undefined) { t.fail('the document lost its echo or session-mismatch examples'); return }
  const wrong = structuredClone(answer.value) as { output: { calls: number } }
  wrong.output.calls = 2
  const expectingOk = { ...mismatch, options: new Map([...mismatch.options].filter(([k]) => k !== 'status')) }
  const renamed = structuredClone(answer.value) as { request_id: string }
  renamed.request_id = 'd0c5d0c5-ffff-4000-8000-000000000001'
  const problems = await checkLive(app, {
    examples: [request, { ...answer, value: wrong }, answer, { ...answer, value: renamed }, expectingOk],
    gets: ['/no-such-route']
  })
  for (const expected of [
    /:\d+: d0c5d0c5-ffff-4000-8000-000000000001 stands for d0c5d0c5-0000-4000-8000-000000000001, which an earlier example calls d0c5d0c5-0000-4000-8000-000000000001$/,
    /:\d+: differs from the server's answer at \/output\/calls: the document has 2, the server 1$/,
    /:\d+: the request answered 400, not 200/,
    /curl GET \/no-such-route answers 404$/
  ]) t.ok(problems.some((p) => expected.test(p)), `reported: ${String(expected)}`, { problems })
  t.equal(problems.length, 4, 'and nothing else')
})
