import { createPublicKey, type JsonWebKey } from 'node:crypto'
import { readFileSync, statSync } from 'node:fs'
import type { FastifyJWTOptions } from '@fastify/jwt'
import type { Config } from '../config.js'
import { AH_ERR_AUTH_UNKNOWN_KEY, AH_ERR_CONFIG_INVALID } from '../errors.js'
import type { Identity } from '../storage/api-keys.js'
import { DEFAULT_TENANT, principalId, TENANT_NAME } from '../storage/tenants.js'
import { SCOPES } from './scopes.js'

/** Why credentials were refused: the audited reason, and the message for the caller. */
export interface Refusal { reason: string, message: string }

/**
 * Why a token was refused (audited as the reason) and what to tell the caller, from the error that
 * @fastify/jwt, fast-jwt or the key lookup raised. Any other error while checking a token is the
 * token's doing too (fast-jwt throws a RangeError on an `nbf` past the year 275760): `invalid`.
 */
export function refusalOf (err: { code?: unknown, message: string }): Refusal {
  const code = typeof err.code === 'string' ? err.code : ''
  if (code === 'FST_JWT_AUTHORIZATION_TOKEN_EXPIRED') return { reason: 'expired', message: err.message }
  if (code === 'FAST_JWT_MISSING_SIGNATURE') return { reason: 'unsigned', message: err.message }
  if (code === 'AH_ERR_AUTH_UNKNOWN_KEY') return { reason: 'unknown_key', message: err.message }
  if (code === 'FAST_JWT_INACTIVE') return { reason: 'not_yet_valid', message: `the token is not valid yet: ${err.message}` }
  if (code.startsWith('FST_JWT_')) return { reason: 'invalid', message: err.message }
  if (code.startsWith('FAST_JWT_')) return { reason: 'invalid', message: `the token is not valid: ${err.message}` }
  return { reason: 'invalid', message: 'the token is not valid' }
}

/** Algorithms accepted with public keys from a JWKS file: never an HMAC one, so a public key cannot be used as a shared secret. */
const PUBLIC_KEY_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']

/** The public keys of a JWKS file by `kid`, as PEM; re-read when a token names a `kid` it lacks and the file has changed (key rotation). */
export class Jwks {
  readonly #path: string
  #keys = new Map<string, string>()
  #mtimeMs = -1

  constructor (path: string) {
    this.#path = path
    this.#load()
  }

  /** The PEM of `kid`, or undefined when the file (re-read if it changed) has no such key. */
  key (kid: unknown): string | undefined {
    if (typeof kid !== 'string') return undefined
    if (!this.#keys.has(kid) && this.#changed()) {
      try {
        this.#load()
      } catch {
        // a half-written file during rotation: keep the keys we have
      }
    }
    return this.#keys.get(kid)
  }

  #changed (): boolean {
    try {
      return statSync(this.#path).mtimeMs !== this.#mtimeMs
    } catch {
      return false
    }
  }

  #load (): void {
    let parsed: { keys?: unknown }
    let mtimeMs: number
    try {
      mtimeMs = statSync(this.#path).mtimeMs
      parsed = JSON.parse(readFileSync(this.#path, 'utf8')) as { keys?: unknown }
    } catch (err) {
      throw new AH_ERR_CONFIG_INVALID(`env/JWT_JWKS_FILE ${this.#path} cannot be read as JSON: ${(err as Error).message}`)
    }
    if (typeof parsed !== 'object' || parsed === null || !Array.isArray(parsed.keys) || parsed.keys.length === 0) {
      throw new AH_ERR_CONFIG_INVALID(`env/JWT_JWKS_FILE ${this.#path} must be a JWKS: {"keys": [{"kid": "...", "kty": ...}, ...]}`)
    }
    const keys = new Map<string, string>()
    for (const jwk of parsed.keys as Array<JsonWebKey & { kid?: unknown }>) {
      if (typeof jwk !== 'object' || jwk === null || typeof jwk.kid !== 'string' || jwk.kid === '') {
        throw new AH_ERR_CONFIG_INVALID(`env/JWT_JWKS_FILE ${this.#path}: every key needs a "kid"`)
      }
      if (jwk.kty === 'oct') throw new AH_ERR_CONFIG_INVALID(`env/JWT_JWKS_FILE ${this.#path}: key "${jwk.kid}" is a shared secret; use JWT_SECRET for HS256`)
      try {
        keys.set(jwk.kid, createPublicKey({ key: jwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' }).toString())
      } catch (err) {
        throw new AH_ERR_CONFIG_INVALID(`env/JWT_JWKS_FILE ${this.#path}: key "${jwk.kid}" is not a usable public key: ${(err as Error).message}`)
      }
    }
    this.#keys = keys
    this.#mtimeMs = mtimeMs
  }
}

/**
 * The @fastify/jwt options for AUTH_MODE=jwt: an HS256 secret or the public keys of a JWKS file
 * (chosen by the token's `kid`), and the checks every token must pass: the configured issuer and
 * audience (both claims required: a token without them is refused), a `sub`, an `exp` in the future and no `nbf` in the future (JWT_CLOCK_TOLERANCE_MS of skew).
 */
export function jwtOptions (config: Config): FastifyJWTOptions {
  const jwks = config.JWT_JWKS_FILE !== '' ? new Jwks(config.JWT_JWKS_FILE) : undefined
  const secret = jwks === undefined
    ? config.JWT_SECRET
    // async: @fastify/jwt turns a rejection into a refusal, where a synchronous throw would escape it
    : async (_request: unknown, token: { header?: { kid?: unknown } }) => {
      const key = jwks.key(token.header?.kid)
      if (key === undefined) throw new AH_ERR_AUTH_UNKNOWN_KEY(JSON.stringify(token.header?.kid ?? null))
      return key
    }
  return {
    secret: secret as FastifyJWTOptions['secret'],
    decode: { complete: true },
    verify: {
      algorithms: jwks === undefined ? ['HS256'] : PUBLIC_KEY_ALGORITHMS,
      allowedIss: config.JWT_ISSUER,
      allowedAud: config.JWT_AUDIENCE,
      requiredClaims: ['sub', 'exp', 'iss', 'aud'],
      clockTolerance: config.JWT_CLOCK_TOLERANCE_MS
    } as unknown as FastifyJWTOptions['verify'],
    messages: {
      authorizationTokenInvalid: (err: Error) => `the token is not valid: ${err.message}`,
      authorizationTokenExpiredMessage: 'the token has expired',
      authorizationTokenUnsigned: 'the token is not signed'
    }
  }
}

/**
 * Who a verified token names: `sub` (the identity `jwt:<sub>`, which owns the sessions it makes),
 * its scopes from `scope` (space-separated, as in OAuth 2) or `scp` (a list; unknown scopes are
 * dropped), the agents it may invoke from `agents` (a list of strings; absent means any), its name
 * from `name`, its tenant from `tenantClaim` (JWT_TENANT_CLAIM; absent: the default tenant, and the
 * identity `tenant:<tenant>/jwt:<sub>` otherwise). A claim of the wrong type is a refusal, never a
 * guess: `sub` must be a non-empty string (of at most 256 characters), `agents` an array of strings,
 * `scope` a string, `scp` an array of strings, the tenant a tenant's name.
 */
export function identityOf (claims: Record<string, unknown>, tenantClaim = 'tenant'): Identity | Refusal {
  const { sub, agents: agentsClaim } = claims
  const tenant = claims[tenantClaim] ?? DEFAULT_TENANT
  if (typeof tenant !== 'string' || !TENANT_NAME.test(tenant)) return { reason: 'bad_claim', message: `the token's ${tenantClaim} must be a tenant's name: 1 to 63 of a-z 0-9 -` }
  if (typeof sub !== 'string' || sub.trim() === '' || sub.length > 256) return { reason: 'bad_claim', message: 'the token\'s sub must be a non-empty string of at most 256 characters' }
  if (agentsClaim !== undefined && !(Array.isArray(agentsClaim) && agentsClaim.every((a) => typeof a === 'string'))) return { reason: 'bad_claim', message: 'the token\'s agents must be an array of agent names or ids' }
  if (claims.scope !== undefined && typeof claims.scope !== 'string') return { reason: 'bad_claim', message: 'the token\'s scope must be a space-separated string' }
  if (claims.scp !== undefined && !(Array.isArray(claims.scp) && claims.scp.every((s) => typeof s === 'string'))) return { reason: 'bad_claim', message: 'the token\'s scp must be an array of strings' }
  const raw = claims.scope ?? claims.scp
  const listed = typeof raw === 'string' ? raw.split(/\s+/) : Array.isArray(raw) ? raw : []
  const known = new Set<string>(SCOPES)
  const agents = agentsClaim === undefined ? null : agentsClaim as string[]
  return {
    id: principalId(tenant, `jwt:${sub}`),
    name: typeof claims.name === 'string' && claims.name !== '' ? claims.name : sub,
    tenant,
    scopes: new Set(listed.filter((s): s is string => typeof s === 'string' && known.has(s))),
    agents: agents === null ? null : new Set(agents),
    anonymous: false
  }
}
