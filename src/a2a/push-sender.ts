import { Agent as HttpAgent, request as httpRequest } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { isIP } from 'node:net'
import { A2A_CONTENT_TYPE } from '@a2a-js/sdk'
import { addressRefusal, guardedLookup, hostOf } from './push-address.js'
import { PUSH_SIGNATURE_HEADER, signPush } from './push-signature.js'

/** The header naming one update (`<config id>/<update number>`): the same on every attempt, so a receiver can drop a repeat. */
export const PUSH_DELIVERY_HEADER = 'X-Agent-Host-Delivery-Id'

/** The header the config's token is sent in (as the SDK's own sender does). */
export const PUSH_TOKEN_HEADER = 'X-A2A-Notification-Token'

/** Where one update goes and how it is authenticated. */
export interface PushTarget {
  url: string
  /** Sent in {@link PUSH_TOKEN_HEADER}, and the key of the update's signature. */
  token: string
  /** Sent as `Authorization: <scheme> <credentials>`. */
  authentication?: { scheme: string, credentials: string } | undefined
}

/** How one POST ended: `ok` when the receiver answered 2xx (nothing else counts, redirects included). */
export type PushOutcome = { ok: true, status: number } | { ok: false, status: number | null, error: string }

/**
 * POSTs push notifications as the A2A SDK's own sender does (the `StreamResponse` JSON as
 * `application/a2a+json`, the token in `X-A2A-Notification-Token`, the config's authentication as
 * `Authorization`), signed with {@link signPush}. No SSRF: an IP literal is checked before a
 * connection is made, a name through {@link guardedLookup}: every address it resolves to, at every
 * new connection, and the connection is made only to those addresses. Connections are kept alive
 * in agents of its own (no other code's requests share them, so none was made without the
 * check); {@link close} ends them.
 */
export class PushSender {
  readonly #timeoutMs: number
  readonly #allowPrivate: boolean
  readonly #lookup
  readonly #http: HttpAgent
  readonly #https: HttpsAgent

  constructor (options: { timeoutMs: number, allowPrivate: boolean }) {
    this.#timeoutMs = options.timeoutMs
    this.#allowPrivate = options.allowPrivate
    this.#lookup = guardedLookup(options.allowPrivate)
    this.#http = new HttpAgent({ keepAlive: true, maxSockets: 8 })
    this.#https = new HttpsAgent({ keepAlive: true, maxSockets: 8 })
  }

  /**
   * POST `body` (one update, as JSON) to `target`, within the timeout (to the end of the answer).
   * Never throws: a failure is an outcome with its status (when one came) and why.
   */
  async send (target: PushTarget, body: string, deliveryId: string, signal: AbortSignal): Promise<PushOutcome> {
    const url = new URL(target.url)
    const host = hostOf(url)
    const literal = isIP(host) !== 0 ? addressRefusal(host, host, this.#allowPrivate) : undefined
    if (literal !== undefined) return { ok: false, status: null, error: literal.message }
    const headers: Record<string, string | number> = {
      'content-type': A2A_CONTENT_TYPE,
      'content-length': Buffer.byteLength(body),
      'user-agent': 'agent-host (A2A push notifications)',
      [PUSH_TOKEN_HEADER]: target.token,
      [PUSH_SIGNATURE_HEADER]: signPush(target.token, body, Math.floor(Date.now() / 1000)),
      [PUSH_DELIVERY_HEADER]: deliveryId,
      ...(target.authentication !== undefined ? { authorization: `${target.authentication.scheme} ${target.authentication.credentials}` } : {})
    }
    const timeout = AbortSignal.timeout(this.#timeoutMs)
    const https = url.protocol === 'https:'
    return await new Promise<PushOutcome>((resolve) => {
      let settled = false
      const finish = (outcome: PushOutcome): void => {
        if (!settled) { settled = true; resolve(outcome) }
      }
      const failed = (status: number | null) => (err: Error): void => {
        finish({ ok: false, status, error: timeout.aborted && !signal.aborted ? `no answer within ${this.#timeoutMs} ms (A2A_PUSH_TIMEOUT_MS)` : err.message })
      }
      const req = (https ? httpsRequest : httpRequest)(url, {
        method: 'POST',
        headers,
        agent: https ? this.#https : this.#http,
        lookup: this.#lookup,
        signal: AbortSignal.any([signal, timeout])
      }, (res) => {
        const status = res.statusCode as number
        res.resume()
        res.on('end', () => { finish(status >= 200 && status < 300 ? { ok: true, status } : { ok: false, status, error: `HTTP ${status}` }) })
        res.on('error', failed(status))
      })
      req.on('error', failed(null))
      req.end(body)
    })
  }

  /** End the kept-alive connections. */
  close (): void {
    this.#http.destroy()
    this.#https.destroy()
  }
}
