import type pg from 'pg'
import { loadPg } from './database.js'

/** The channels instances tell each other on. Payloads are ids only, comma-separated. */
export const CHANNELS = {
  /** Run ids whose journal grew or that ended (one notification per transaction). */
  journal: 'agent_host_journal',
  /** Request ids (run keys) another instance asked to cancel. */
  cancel: 'agent_host_cancel',
  /** MCP sessions' signals (`storage/mcp-sessions.ts:McpSignal`, each encoded without commas). */
  mcp: 'agent_host_mcp'
} as const

export type Channel = typeof CHANNELS[keyof typeof CHANNELS]

/** A notification's payload limit is 8 000 bytes: ids are sent in chunks well below it. */
const MAX_PAYLOAD = 7000

/** Queue notifications of `ids` on `channel` in the caller's transaction (sent when it commits; none if it rolls back). */
export async function notifyIn (client: pg.ClientBase, channel: Channel, ids: ReadonlyArray<string | number>): Promise<void> {
  const chunks: string[] = []
  let chunk = ''
  for (const id of ids) {
    const next = chunk === '' ? String(id) : `${chunk},${String(id)}`
    if (next.length > MAX_PAYLOAD) {
      chunks.push(chunk)
      chunk = String(id)
    } else {
      chunk = next
    }
  }
  if (chunk !== '') chunks.push(chunk)
  if (chunks.length > 0) await client.query({ name: 'ah_notify_many', text: 'SELECT pg_notify($1, c) FROM unnest($2::text[]) AS c', values: [channel, chunks] })
}

/**
 * One connection of its own (outside the pool) that LISTENs on every channel and tells each id to
 * its subscribers. When the connection drops it reconnects with backoff (100 ms doubling to 5 s);
 * while it is down {@link connected} is false and waiters fall back to polling, so a lost
 * notification costs latency, never correctness.
 */
export class PgNotifications {
  readonly #config: pg.ClientConfig
  readonly #log: { warn: (obj: object, msg: string) => void }
  readonly #listeners = new Map<Channel, Set<(id: string) => void>>()
  #client: pg.Client | undefined
  #connected = false
  #closed = false
  #retry: NodeJS.Timeout | undefined
  #backoffMs = 100
  /** Settles when {@link close} is called: a connect in flight is not waited for then. */
  readonly #whenClosed: Promise<void>
  #markClosed!: () => void

  /**
   * @param config the listening connection's; `connectionTimeoutMillis` defaults to 10 s, so that a
   *   connect to a server that does not answer (a network partition) fails and is retried
   */
  constructor (config: pg.ClientConfig, log: { warn: (obj: object, msg: string) => void }) {
    this.#config = { connectionTimeoutMillis: 10_000, ...config }
    this.#log = log
    this.#whenClosed = new Promise((resolve) => { this.#markClosed = resolve })
  }

  /** Whether the listening connection is up now. */
  get connected (): boolean { return this.#connected }

  /** Connect and listen; resolves once listening, once the first try failed (it keeps retrying), or once closed. */
  async start (): Promise<void> {
    await Promise.race([this.#connect(), this.#whenClosed])
  }

  /** Call `listener` with each id notified on `channel`; returns the function that stops it. */
  on (channel: Channel, listener: (id: string) => void): () => void {
    let set = this.#listeners.get(channel)
    if (set === undefined) this.#listeners.set(channel, set = new Set())
    set.add(listener)
    return () => { set.delete(listener) }
  }

  async close (): Promise<void> {
    this.#closed = true
    this.#markClosed()
    clearTimeout(this.#retry)
    const client = this.#client
    const connected = this.#connected
    this.#client = undefined
    this.#connected = false
    const ended = client?.end().catch(() => {})
    // a connect still in flight ends when it fails or times out; only a connection that is up is waited for
    if (connected) await ended
  }

  async #connect (): Promise<void> {
    const { Client } = await loadPg()
    if (this.#closed) return
    const client = new Client(this.#config)
    const lost = (err?: Error): void => {
      if (this.#client !== client) return
      this.#client = undefined
      this.#connected = false
      client.removeAllListeners()
      client.end().catch(() => {})
      if (this.#closed) return
      this.#log.warn({ err }, 'the PostgreSQL notification connection was lost; followers poll until it is back')
      this.#retry = setTimeout(() => { this.#connect().catch(() => {}) }, this.#backoffMs)
      this.#backoffMs = Math.min(this.#backoffMs * 2, 5000)
    }
    this.#client = client
    client.on('error', lost)
    client.on('end', () => { lost() })
    client.on('notification', (message) => {
      const listeners = this.#listeners.get(message.channel as Channel)
      if (listeners === undefined || message.payload === undefined) return
      for (const id of message.payload.split(',')) for (const listener of listeners) listener(id)
    })
    try {
      await client.connect()
      for (const channel of Object.values(CHANNELS)) await client.query(`LISTEN ${channel}`)
      if (this.#client !== client) return
      this.#connected = true
      this.#backoffMs = 100
    } catch (err) {
      lost(err as Error)
    }
  }
}
