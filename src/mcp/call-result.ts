import type { CallToolResult, LoggingLevel } from '@modelcontextprotocol/sdk/types.js'
import type { JsonObject } from '../agents/contract.js'
import type { Interrupt } from '../protocol/interrupts.js'
import type { Citation, CloseReason, DataEvent, EventPayload, MediaItem, StreamError, StreamPacket } from '../protocol/packets.js'

/** The `_meta` keys of a tool result that name its CAP run (see `GET /v1/sessions/{id}/history`, `/v1/events`, `/v1/audit`). */
export const META_REQUEST_ID = 'agent-host/request_id'
export const META_SESSION_ID = 'agent-host/session_id'

/** A `notifications/progress` to send, without its token. */
export interface ProgressUpdate {
  progress: number
  total: number
  message: string
}

/** A `notifications/message` to send. */
export interface LogUpdate {
  level: LoggingLevel
  logger: string
  data: JsonObject
}

/** What one packet asks the binding to tell the client now. */
export interface PacketUpdate {
  progress?: ProgressUpdate
  log?: LogUpdate
}

/** The agent's `log()` levels (pino's) as MCP's (RFC 5424's). */
const LOG_LEVELS: Readonly<Record<string, LoggingLevel>> = {
  trace: 'debug', debug: 'debug', info: 'info', warn: 'warning', error: 'error', fatal: 'critical'
}

/** An agent `log()` level as an MCP logging level (`info` for anything unknown). */
export function mcpLogLevel (level: unknown): LoggingLevel {
  return (typeof level === 'string' ? LOG_LEVELS[level] : undefined) ?? 'info'
}

/** One content item of a tool result (text, image, audio, a resource link, an embedded resource). */
type Content = CallToolResult['content'][number]

/**
 * A media item as MCP content: an image or audio whose `url` is a `data:` URL is the content itself
 * (MCP carries them as base64 data); any other item, and any other media, a link to it.
 */
export function mediaContent (item: MediaItem): Content {
  const data = /^data:([^;,]+)?((?:;[^;,]*)*?)(;base64)?,(.*)$/s.exec(item.url)
  const kind = item.mime_type.startsWith('image/') ? 'image' : item.mime_type.startsWith('audio/') ? 'audio' : undefined
  if (data !== null && kind !== undefined) {
    const body = data[4] as string
    const base64 = data[3] !== undefined ? body : Buffer.from(decodeURIComponent(body), 'utf8').toString('base64')
    return { type: kind, data: base64, mimeType: item.mime_type, ...(item.alt_text !== undefined ? { _meta: { alt_text: item.alt_text } } : {}) }
  }
  // a data: URL is no name for anything: the item's media type is
  return { type: 'resource_link', uri: item.url, name: item.alt_text ?? (data !== null ? item.mime_type : item.url), mimeType: item.mime_type }
}

/** A cited source as MCP content: a link to it, its snippet the description. */
export function citationContent (citation: Citation): Content {
  return {
    type: 'resource_link',
    uri: citation.uri,
    name: citation.source_id,
    title: citation.title,
    ...(citation.snippet !== undefined ? { description: citation.snippet } : {}),
    _meta: { confidence: citation.confidence }
  }
}

/** A DATA event as MCP content: an embedded JSON resource named by the event's id. */
export function dataContent (event: DataEvent): Content {
  return {
    type: 'resource',
    resource: { uri: `urn:uuid:${event.id}`, mimeType: 'application/json', text: JSON.stringify(event.data) },
    _meta: { view_hint: event.view_hint, ...(event.title !== undefined ? { title: event.title } : {}) }
  }
}

/**
 * One tool call's run, packet by packet, into MCP: the text the run produced (MARKDOWN blocks and
 * DELTA chunks, in order: the JSON transcript's `text`), its media, sources and data as content
 * ({@link mediaContent}, {@link citationContent}, {@link dataContent}), the agent's `result()`, and how the main
 * stream ended (with the questions of a run that stopped to ask). Progress packets become progress
 * updates, thoughts and non-fatal errors log updates. A call whose run asks goes on in the runs that
 * answer it: {@link CallResultBuilder.next} before each, the text and progress carried over.
 */
export class CallResultBuilder {
  #text = ''
  /** Images, audio, links and resources, in the order the runs made them (after the text in the result). */
  readonly #rich: Content[] = []
  #result: JsonObject | undefined
  #error: StreamError | undefined
  #end: CloseReason | undefined
  #interrupts: Interrupt[] | undefined
  #progress = 0
  readonly #logger: string

  /** @param logger the `logger` of the log updates (the agent's name) */
  constructor (logger: string) {
    this.#logger = logger
  }

  /** How the last run's main stream ended (undefined until its CLOSE). */
  get end (): CloseReason | undefined { return this.#end }

  /** The open questions of the last run, when it stopped to ask (its INTERRUPT event). */
  get interrupts (): Interrupt[] | undefined { return this.#interrupts }

  /** The next run of the call (one that answers the last one's questions) begins. */
  next (): void {
    this.#end = undefined
    this.#interrupts = undefined
    this.#error = undefined
  }

  /**
   * Take one packet (`final`: it is the main stream's CLOSE, the run's last packet); returns what to
   * tell the client now, if anything.
   */
  add (packet: StreamPacket, final = false): PacketUpdate {
    switch (packet.op) {
      case 'DELTA':
        this.#text += packet.p
        return {}
      case 'ERROR':
        return this.#onError(packet.p)
      case 'CLOSE':
        if (final) this.#end = packet.p
        return {}
      case 'EVENT':
        return this.#onEvent(packet.p)
    }
  }

  #onError (error: StreamError): PacketUpdate {
    if (error.severity !== 'WARNING') this.#error = error
    const level: LoggingLevel = error.severity === 'WARNING' ? 'warning' : 'error'
    return { log: { level, logger: this.#logger, data: { error: error.code, message: error.message, severity: error.severity } } }
  }

  #onEvent (event: EventPayload): PacketUpdate {
    switch (event.type) {
      case 'MARKDOWN_BLOCK':
        this.#text += event.data.content
        return {}
      case 'RESULT':
        this.#result = event.data
        return {}
      case 'MEDIA_CAROUSEL':
        this.#rich.push(...event.data.items.map(mediaContent))
        return {}
      case 'CITATION_BLOCK':
        this.#rich.push(...event.data.citations.map(citationContent))
        return {}
      case 'DATA':
        this.#rich.push(dataContent(event))
        return {}
      case 'INTERRUPT':
        this.#interrupts = event.interrupts
        return {}
      case 'THOUGHT_TRACE':
        return { log: { level: 'info', logger: this.#logger, data: { thought: event.data.thought, status: event.data.status } } }
      case 'PROGRESS_INDICATOR': {
        const { label, status, progress_percent: percent } = event.data
        const value = percent !== undefined ? percent * 100 : status === 'complete' ? 100 : undefined
        // MCP's progress must grow with every notification: a step that does not advance it is a log line instead
        if (value !== undefined && value > this.#progress) {
          this.#progress = value
          return { progress: { progress: value, total: 100, message: label } }
        }
        return { log: { level: status === 'failed' ? 'warning' : 'info', logger: this.#logger, data: { progress: label, status } } }
      }
      default:
        return {}
    }
  }

  /**
   * The `tools/call` result: the text as `text` content, then the media, sources and data; the `result()` object as `structuredContent`
   * and as JSON text; `isError` with the CAP error's message when the run did not end `done`.
   * `needsStructured`: the tool declares an `outputSchema`, so a run that ended `done` without a
   * `result()` broke its promise (an error, since a client may not accept the result otherwise).
   */
  build (meta: JsonObject, needsStructured = false): CallToolResult {
    const content = this.content
    const failure = this.#failure(needsStructured)
    if (failure !== undefined) {
      content.push({ type: 'text', text: failure })
      return { content, isError: true, _meta: meta }
    }
    if (this.#result === undefined) return { content, _meta: meta }
    content.push({ type: 'text', text: JSON.stringify(this.#result) })
    return { content, structuredContent: this.#result, _meta: meta }
  }

  /** A result that ends the call with an error the binding saw (`<code>: <message>`), after the text the runs wrote. */
  fail (meta: JsonObject, text: string): CallToolResult {
    return { content: [...this.content, { type: 'text', text }], isError: true, _meta: meta }
  }

  /** What the runs made so far, as content: their text, then their media, sources and data. */
  get content (): CallToolResult['content'] {
    return [...(this.#text !== '' ? [{ type: 'text' as const, text: this.#text }] : []), ...this.#rich]
  }

  /** Why the call failed, as the model should read it, if it did. */
  #failure (needsStructured: boolean): string | undefined {
    const end = this.#end ?? 'aborted'
    if (end === 'done') {
      return needsStructured && this.#result === undefined ? 'agent_contract_violation: the agent ended without calling result(), which its outputSchema promises' : undefined
    }
    if (this.#error !== undefined) return `${this.#error.code}: ${this.#error.message}`
    return end === 'cancelled' ? 'cancelled: the run was cancelled' : `${end}: the run ended before it finished`
  }
}
