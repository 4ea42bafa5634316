import type { OAuthClientProvider, OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { OAuthSpec } from './servers-file.js'

/** Where a run of the SDK's `auth()` was: finding the authorization server, or asking it for a token. */
export type OAuthStep = 'discovery' | 'token request'

export interface OAuthProviderOptions {
  /** The MCP server's endpoint (discovery starts there; a discovery failure names it). */
  server: URL
  /** The clock, in milliseconds since the epoch (tests turn it). */
  now?: () => number
}

/** How long before its end an access token is no longer sent: a tenth of its life, at most 30 s. */
const EARLY_MS = 30_000
const REDACTED = '[redacted]'
const INTERACTIVE = 'the authorization server asks for a person to sign in (the authorization code flow), which the host cannot do: give the server\'s entry a client_credentials or a refresh_token grant'

/**
 * The host's OAuth client of one MCP server: the SDK's `OAuthClientProvider`, which its Streamable
 * HTTP transport takes as `authProvider`. The transport calls the SDK's `auth()` when the server
 * answers 401; `auth()` finds the authorization server (the 401's `WWW-Authenticate`
 * `resource_metadata`, the server's protected resource metadata, then the authorization server's
 * metadata, kept here after the first time) and asks it for a token with the grant of the server's
 * entry, which this provider prepares: `client_credentials`, or `refresh_token` with the refresh
 * token the authorization server gave last (a rotated one replaces the configured one). Everything is
 * held in memory, for the life of the host's connection to that server.
 *
 * An access token is sent until shortly before it expires (`expires_in`); after that the request
 * goes without one, the server answers 401 and `auth()` gets a new token: a token that expires, or
 * that the server stops accepting, costs the call one round trip, never its success.
 * The interactive flow (a person signing in at the authorization server) is refused.
 */
export class HostOAuthProvider implements OAuthClientProvider {
  readonly #spec: OAuthSpec
  readonly #server: URL
  readonly #now: () => number
  #tokens: OAuthTokens | undefined
  #staleAt = 0
  #refreshToken: string | undefined
  /** The authorization server the credentials are bound to: the entry's, or the first that accepted them (the SDK stamps it). */
  #issuer: string | undefined
  #discovery: OAuthDiscoveryState | undefined
  #step: OAuthStep | undefined

  /** With the entry's `resource`: the resource indicator asked for, instead of the one the server's metadata names. */
  validateResourceURL?: (serverUrl: string | URL, resource?: string) => Promise<URL | undefined>

  constructor (spec: OAuthSpec, options: OAuthProviderOptions) {
    this.#spec = spec
    this.#server = options.server
    this.#now = options.now ?? Date.now
    this.#issuer = spec.authorizationServer
    if (spec.grant === 'refresh_token') this.#refreshToken = spec.refreshToken
    const resource = spec.resource
    if (resource !== undefined) this.validateResourceURL = async () => resource
  }

  /** None: no person signs in, the grant is client_credentials or refresh_token. */
  get redirectUrl (): undefined { return undefined }

  get clientMetadata (): OAuthClientMetadata {
    return { client_name: 'agent-host', redirect_uris: [], grant_types: [this.#spec.grant], ...(this.#spec.scope !== undefined ? { scope: this.#spec.scope } : {}) }
  }

  clientInformation (): OAuthClientInformationMixed {
    return {
      client_id: this.#spec.clientId,
      ...(this.#spec.clientSecret !== undefined ? { client_secret: this.#spec.clientSecret } : {}),
      ...(this.#issuer !== undefined ? { issuer: this.#issuer } : {})
    }
  }

  /** The SDK binds the configured client to the authorization server that first accepted it: only that binding is kept. */
  saveClientInformation (information: OAuthClientInformationMixed): void {
    this.#issuer ??= information.issuer
  }

  /** The access token, until shortly before it expires. */
  tokens (): OAuthTokens | undefined {
    return this.#tokens !== undefined && this.#now() < this.#staleAt ? this.#tokens : undefined
  }

  saveTokens (tokens: OAuthTokens): void {
    this.#step = undefined
    this.#tokens = tokens
    const lifeMs = tokens.expires_in !== undefined ? tokens.expires_in * 1000 : undefined
    this.#staleAt = lifeMs === undefined ? Infinity : this.#now() + lifeMs - Math.min(lifeMs / 10, EARLY_MS)
    if (tokens.refresh_token !== undefined && this.#spec.grant === 'refresh_token') this.#refreshToken = tokens.refresh_token
  }

  /** The token request of the entry's grant (`auth()` adds the client's authentication and the resource indicator). */
  prepareTokenRequest (scope?: string): URLSearchParams {
    this.#step = 'token request'
    const params = new URLSearchParams({ grant_type: this.#spec.grant })
    if (this.#refreshToken !== undefined) params.set('refresh_token', this.#refreshToken)
    if (scope !== undefined && scope !== '') params.set('scope', scope)
    return params
  }

  /** What discovery found last time (`auth()` asks first: a run starts here). */
  discoveryState (): OAuthDiscoveryState | undefined {
    this.#step = 'discovery'
    return this.#discovery
  }

  saveDiscoveryState (state: OAuthDiscoveryState): void {
    this.#discovery = state
  }

  /** What `auth()` found refused: the access token, or discovery's results; the client and the refresh token are the entry's and stay. */
  invalidateCredentials (scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (scope === 'all' || scope === 'tokens') { this.#tokens = undefined; this.#staleAt = 0 }
    if (scope === 'all' || scope === 'discovery') this.#discovery = undefined
  }

  redirectToAuthorization (): never { throw new Error(INTERACTIVE) }
  saveCodeVerifier (): never { throw new Error(INTERACTIVE) }
  codeVerifier (): never { throw new Error(INTERACTIVE) }

  /**
   * Why the run of `auth()` that threw `err` failed: the step it was at (discovery, naming the MCP
   * server; the token request, naming the grant and the token endpoint) and the authorization server's
   * error code (`invalid_client`), or `described` (the error as a failure message says it), every
   * secret and token this provider holds masked. Undefined when no run was under way: `err` is not an
   * OAuth failure.
   */
  failure (err: unknown, described: string): string | undefined {
    const step = this.#step
    this.#step = undefined
    if (step === undefined) return undefined
    const e = err as { message?: unknown, errorCode?: unknown } | undefined
    const detail = typeof e?.errorCode === 'string' ? `${e.errorCode}${typeof e.message === 'string' && e.message !== '' ? ` (${e.message})` : ''}` : described
    const text = step === 'discovery'
      ? `OAuth discovery for ${this.#server.href} failed: ${detail}`
      : `OAuth token request (${this.#spec.grant} grant) to ${this.#tokenEndpoint()} failed: ${detail}`
    return this.redact(text)
  }

  /** `text` with every secret and token this provider holds masked. */
  redact (text: string): string {
    const secrets = [this.#spec.clientSecret, this.#spec.grant === 'refresh_token' ? this.#spec.refreshToken : undefined, this.#refreshToken, this.#tokens?.access_token, this.#tokens?.refresh_token]
    return secrets.reduce<string>((t, secret) => secret !== undefined && secret !== '' ? t.replaceAll(secret, REDACTED) : t, text)
  }

  #tokenEndpoint (): string {
    const found = this.#discovery
    if (found === undefined) return 'the authorization server'
    return found.authorizationServerMetadata?.token_endpoint ?? new URL('/token', found.authorizationServerUrl).href
  }
}
