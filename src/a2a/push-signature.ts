import { createHmac, timingSafeEqual } from 'node:crypto'

/** The header every push notification is signed in: `t=<unix seconds>,v1=<hex HMAC-SHA256>`. */
export const PUSH_SIGNATURE_HEADER = 'X-Agent-Host-Signature'

/** How old a signature may be, by default, before {@link verifyPushSignature} refuses it (a replay). */
export const DEFAULT_TOLERANCE_SECONDS = 300

function mac (token: string, timestamp: number, body: string | Buffer): Buffer {
  return createHmac('sha256', token).update(`${timestamp}.`).update(body).digest()
}

/**
 * The signature header's value for `body` sent at `timestamp` (unix seconds): HMAC-SHA256 keyed by
 * the config's token over `"<timestamp>.<body>"`, in hex.
 */
export function signPush (token: string, body: string | Buffer, timestamp: number): string {
  return `t=${timestamp},v1=${mac(token, timestamp, body).toString('hex')}`
}

/**
 * Whether a push notification is genuine: its `X-Agent-Host-Signature` header (`header`) signs
 * exactly `body` (the raw bytes received, before any JSON parsing) with the config's `token`, and
 * was made at most `toleranceSeconds` from `now` (unix seconds), so a recorded notification cannot
 * be replayed later. A receiver's reference; the comparison is constant-time.
 */
export function verifyPushSignature (options: { header: string | undefined, body: string | Buffer, token: string, toleranceSeconds?: number, now?: number }): boolean {
  let timestamp = Number.NaN
  const signatures: string[] = []
  for (const part of (options.header ?? '').split(',')) {
    const [key, value = ''] = part.trim().split('=', 2)
    if (key === 't' && /^\d{1,12}$/.test(value)) timestamp = Number(value)
    else if (key === 'v1' && /^[0-9a-f]{64}$/i.test(value)) signatures.push(value)
  }
  if (Number.isNaN(timestamp)) return false
  const now = options.now ?? Math.floor(Date.now() / 1000)
  if (Math.abs(now - timestamp) > (options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS)) return false
  const expected = mac(options.token, timestamp, options.body)
  return signatures.some((hex) => timingSafeEqual(Buffer.from(hex, 'hex'), expected))
}
