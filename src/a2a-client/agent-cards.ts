import type { KeyObject } from 'node:crypto'
import { A2A_PROTOCOL_VERSION, A2A_VERSION_HEADER, canonicalizeAgentCard, type AgentCard } from '@a2a-js/sdk'
import {
  ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory, createAuthenticatingFetchWithRetry, type Client
} from '@a2a-js/sdk/client'
import { base64url, flattenedVerify } from 'jose'
import { AH_ERR_REMOTE_CARD_UNVERIFIED } from '../errors.js'
import { canonicalJson } from '../storage/canonical-json.js'
import type { A2AAgentConfig } from './agents-file.js'
import { interfaceRefusal } from './card-interfaces.js'

/** An external agent ready to call: its card, and the SDK's client for it (its transport chosen from the card, its credentials on every request). */
export interface RemoteAgent {
  card: AgentCard
  client: Client
}

/** How agent cards are fetched and kept. */
export interface AgentCardOptions {
  /** How long a card is used when its response says nothing of caching (default 60 s). */
  defaultTtlMs?: number
  /** The longest a card is used before it is asked for again, whatever its response says (default one hour). */
  maxTtlMs?: number
  /** How long fetching a card may take (default 10 s). */
  timeoutMs?: number
  now?: () => number
}

interface Entry {
  remote: RemoteAgent
  etag: string | undefined
  expiresAt: number
}

/**
 * How long a card response may be used without asking again, in ms: `Cache-Control`'s `max-age`
 * (`no-store` and `no-cache`: not at all), else `Expires`, else `defaultMs`; at most `maxMs`.
 */
export function freshness (headers: Headers, now: number, defaultMs: number, maxMs: number): number {
  const control = (headers.get('cache-control') ?? '').toLowerCase().split(',').map((d) => d.trim())
  if (control.some((d) => d === 'no-store' || d === 'no-cache')) return 0
  const maxAge = control.map((d) => /^max-age=(\d+)$/.exec(d)?.[1]).find((v) => v !== undefined)
  let ms = defaultMs
  if (maxAge !== undefined) ms = Number(maxAge) * 1000
  else if (headers.has('expires')) {
    const at = Date.parse(headers.get('expires') as string)
    ms = Number.isNaN(at) ? 0 : at - now
  }
  return Math.max(0, Math.min(ms, maxMs))
}

/**
 * `fetch` that follows no redirect (a card or an interface may not send the host's credentials on to
 * a URL nobody checked), and whose response body ends when the request's signal fires after the
 * headers came. undici links the signal to the body through the request object, held weakly: once
 * that is garbage-collected mid-stream, an abort no longer reaches the body, and a streaming call
 * past its timeout read on until undici's own 300 s body timeout. The pipe's listener holds the body.
 */
const noRedirects: typeof fetch = async (input, init) => {
  const response = await fetch(input, { ...init, redirect: 'error' })
  const signal = init?.signal
  if (signal === undefined || signal === null || response.body === null) return response
  return new Response(response.body.pipeThrough(new TransformStream(), { signal }), response)
}

/**
 * The external agents' cards, fetched with their credentials and kept as their HTTP cache headers
 * say (revalidated with `If-None-Match` when they had an `ETag`). Concurrent calls share one fetch.
 * A card is checked before it is used ({@link interfaceRefusal}); one that fails to load is not kept.
 */
export class AgentCards {
  readonly #entries = new Map<string, Entry>()
  readonly #loading = new Map<string, Promise<RemoteAgent>>()
  readonly #defaultTtlMs: number
  readonly #maxTtlMs: number
  readonly #timeoutMs: number
  readonly #now: () => number

  constructor (options: AgentCardOptions = {}) {
    this.#defaultTtlMs = options.defaultTtlMs ?? 60_000
    this.#maxTtlMs = options.maxTtlMs ?? 3_600_000
    this.#timeoutMs = options.timeoutMs ?? 10_000
    this.#now = options.now ?? Date.now
  }

  /**
   * The agent's card and client: the kept one while fresh, else fetched (or revalidated).
   * @throws an Error whose message says why the agent cannot be called (unreachable, not a card, an interface refused)
   */
  async get (agent: A2AAgentConfig, signal?: AbortSignal): Promise<RemoteAgent> {
    const entry = this.#entries.get(agent.name)
    if (entry !== undefined && entry.expiresAt > this.#now()) return entry.remote
    signal?.throwIfAborted()
    let loading = this.#loading.get(agent.name)
    if (loading === undefined) {
      loading = this.#load(agent, entry).finally(() => { this.#loading.delete(agent.name) })
      // every caller may have given up by the time it fails
      loading.catch(() => {})
      this.#loading.set(agent.name, loading)
    }
    if (signal === undefined) return await loading
    // the fetch is shared: one caller giving up stops waiting for it, not the fetch
    let stop: (() => void) | undefined
    const aborted = new Promise<never>((_resolve, reject) => {
      stop = () => { reject(signal.reason) }
      signal.addEventListener('abort', stop, { once: true })
    })
    try {
      return await Promise.race([loading, aborted])
    } finally {
      signal.removeEventListener('abort', stop as () => void)
    }
  }

  /** Forget every card (they are fetched again on their next call). */
  clear (): void {
    this.#entries.clear()
  }

  async #load (agent: A2AAgentConfig, entry: Entry | undefined): Promise<RemoteAgent> {
    const headers: Record<string, string> = { ...agent.headers, Accept: 'application/json', [A2A_VERSION_HEADER]: A2A_PROTOCOL_VERSION }
    if (entry?.etag !== undefined) headers['If-None-Match'] = entry.etag
    let response: Response
    try {
      response = await noRedirects(agent.cardUrl, { headers, signal: AbortSignal.timeout(this.#timeoutMs) })
    } catch (err) {
      throw new Error(`its card could not be fetched from ${agent.cardUrl}: ${reasonOf(err)}`, { cause: err })
    }
    const now = this.#now()
    const ttl = freshness(response.headers, now, this.#defaultTtlMs, this.#maxTtlMs)
    if (response.status === 304 && entry !== undefined) {
      await response.body?.cancel()
      this.#entries.set(agent.name, { ...entry, expiresAt: now + ttl })
      return entry.remote
    }
    if (!response.ok) {
      await response.body?.cancel()
      throw new Error(`its card could not be fetched from ${agent.cardUrl}: HTTP ${response.status}`)
    }
    let raw: unknown
    try {
      raw = await response.json()
    } catch (err) {
      throw new Error(`its card at ${agent.cardUrl} is not JSON: ${reasonOf(err)}`, { cause: err })
    }
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error(`its card at ${agent.cardUrl} is not an agent card (not a JSON object)`)
    if (agent.cardKey !== undefined) await checkCardSignature(raw as Record<string, unknown>, agent.cardKey, agent.cardUrl)
    const card = new DefaultAgentCardResolver().normalizeAgentCard(raw)
    const refusal = interfaceRefusal(card, agent.cardUrl, agent.allowedHosts)
    if (refusal !== undefined) throw new Error(refusal)
    const fetchImpl = createAuthenticatingFetchWithRetry(noRedirects, { headers: async () => ({ ...agent.headers }), shouldRetryWithHeaders: async () => undefined })
    const factory = new ClientFactory({ transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })] })
    const remote = { card, client: await factory.createFromAgentCard(card) }
    const etag = response.headers.get('etag') ?? undefined
    if (ttl > 0 || etag !== undefined) this.#entries.set(agent.name, { remote, etag, expiresAt: now + ttl })
    else this.#entries.delete(agent.name)
    return remote
  }
}

/**
 * Check that `card`, as received, carries a signature by `key` (A2A v1.0 §8.4): one of its `signatures`
 * is a valid detached JWS over the card without `signatures` in RFC 8785 canonical JSON, or over the
 * a2a SDKs' canonical form of it (default and empty values left out, as §8.4.1 asks: what a peer
 * signing with those SDKs signs). Which `kid` or `jku` a signature names does not matter: the key is
 * the operator's.
 * @throws AH_ERR_REMOTE_CARD_UNVERIFIED saying why no signature is valid
 */
export async function checkCardSignature (card: Readonly<Record<string, unknown>>, key: KeyObject, cardUrl: string): Promise<void> {
  const signatures: unknown[] = Array.isArray(card.signatures) ? card.signatures : []
  if (signatures.length === 0) throw new AH_ERR_REMOTE_CARD_UNVERIFIED(cardUrl, 'it has no signatures')
  const { signatures: _, ...unsigned } = card
  const payloads = [...new Set([canonicalJson(unsigned), sdkCanonicalForm(unsigned)].filter((p) => p !== undefined))].map((p) => base64url.encode(p))
  const failures = new Set<string>()
  for (const entry of signatures) {
    const { protected: header, signature } = (typeof entry === 'object' && entry !== null ? entry : {}) as { protected?: string, signature?: string }
    for (const payload of payloads) {
      try {
        await flattenedVerify({ payload, protected: header, signature: signature as string }, key)
        return
      } catch (err) {
        failures.add((err as Error).message)
      }
    }
  }
  throw new AH_ERR_REMOTE_CARD_UNVERIFIED(cardUrl, `none of its ${signatures.length} signature${signatures.length === 1 ? '' : 's'} is valid (${[...failures].join('; ')})`)
}

/** The a2a SDKs' canonical form of a card, or undefined for one their parser fails on (a `null` skill): only its plain canonical JSON can be signed then. */
function sdkCanonicalForm (card: Readonly<Record<string, unknown>>): string | undefined {
  try {
    return canonicalizeAgentCard(card as unknown as AgentCard)
  } catch {
    return undefined
  }
}

/** The message of a failure, with its cause's (fetch's "fetch failed" says nothing by itself). */
export function reasonOf (err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : undefined
  return cause !== undefined && cause !== message ? `${message} (${cause})` : message
}
