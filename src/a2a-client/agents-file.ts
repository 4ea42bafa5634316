import { createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { dirname, resolve as resolvePath } from 'node:path'
import { lazySchema, settingsFile } from '../agents/json-schema.js'
import { A2AAgentsFile, type A2AAgentEntry } from '../protocol/a2a-client.js'

/** How long a call waits for its answer when neither it nor its agent's entry says (the seed's A2ARequest default). */
export const DEFAULT_CALL_TIMEOUT_S = 300

/** One external agent of A2A_AGENTS_FILE, checked and with its credentials resolved. */
export interface A2AAgentConfig {
  /** The name agents call it by. */
  name: string
  cardUrl: string
  /** Sent with the card request and every call: `Authorization` from `bearer_token`, and `headers`. */
  headers: Readonly<Record<string, string>>
  /** The skills agents may ask of it. */
  capabilities: readonly string[]
  /** The local agents that may call it; undefined: every agent. */
  callers?: readonly string[]
  timeoutS: number
  /** Hosts (`host[:port]`, lower case) its card's interfaces may point to besides the card URL's host. */
  allowedHosts: readonly string[]
  /** true: every call waits for a person's approval before it reaches the agent; absent: none does. */
  requireApproval?: true
  /** The public key its card must be signed by (its `card_key`); absent: its card is used signed or not. */
  cardKey?: KeyObject
}

/** Whether a call of the external agent `config` waits for a person's approval (its `require_approval`). */
export function requiresApproval (config: Pick<A2AAgentConfig, 'requireApproval'>): boolean {
  return config.requireApproval === true
}

/** Headers the A2A client sets itself: an entry may not send its own. */
const RESERVED_HEADERS = new Set(['accept', 'content-type', 'content-length', 'host', 'a2a-version', 'transfer-encoding', 'connection'])
const REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g
const checkFile = lazySchema<A2AAgentsFile>(A2AAgentsFile)

/**
 * Read A2A_AGENTS_FILE: the external A2A agents agents may call. `${NAME}` in `card_url`,
 * `bearer_token` and header values is replaced by the environment variable NAME of `env` (the
 * server's, where `PORT` is the port it listens on, set or not), here, once. A `card_key` (a public
 * key file, PEM or JWK, relative to the file's folder) is read here too. Every problem is reported, one line each, naming its place in the file.
 * @param path the file; empty: no external agents
 * @throws AH_ERR_CONFIG_INVALID listing every problem of the file
 */
export function loadA2AAgents (path: string, env: Record<string, string | undefined>): A2AAgentConfig[] {
  if (path === '') return []
  const { parsed, fail } = settingsFile('A2A_AGENTS_FILE', path, checkFile, readable)
  const problems: string[] = []
  const agents = Object.entries(parsed.agents).map(([name, entry]) => agentOf(name, entry, env, dirname(path), (p) => { problems.push(`/agents/${name}/${p}`) }))
  if (problems.length > 0) fail(problems)
  return agents
}

function agentOf (name: string, entry: A2AAgentEntry, env: Record<string, string | undefined>, folder: string, problem: (p: string) => void): A2AAgentConfig {
  const resolve = (where: string, value: string): string => value.replace(REFERENCE, (_, variable: string) => {
    const found = env[variable]
    if (found === undefined || found === '') problem(`${where}: \${${variable}} is not set in the server's environment`)
    return found ?? ''
  })
  const cardUrl = resolve('card_url', entry.card_url)
  const url = parseUrl(cardUrl)
  if (url === undefined || !['http:', 'https:'].includes(url.protocol)) problem('card_url: must be an absolute http or https URL')
  else if (url.username !== '' || url.password !== '') problem('card_url: must not carry credentials (use bearer_token or headers)')
  const headers: Record<string, string> = {}
  for (const [header, value] of Object.entries(entry.headers ?? {})) {
    if (RESERVED_HEADERS.has(header.toLowerCase())) problem(`headers/${header}: the A2A client sets this header itself`)
    else headers[header] = resolve(`headers/${header}`, value)
  }
  if (entry.bearer_token !== undefined) {
    if (Object.keys(headers).some((h) => h.toLowerCase() === 'authorization')) problem('bearer_token: give either bearer_token or an Authorization header, not both')
    headers.Authorization = `Bearer ${resolve('bearer_token', entry.bearer_token)}`
  }
  const allowedHosts = (entry.allowed_hosts ?? []).map((host, i) => {
    const parsed = /^[^/?#@\\\s]+$/.test(host) ? parseUrl(`http://${host}`) : undefined
    if (parsed === undefined) problem(`allowed_hosts/${i}: "${host}" must be a host name or address, with an optional :port`)
    return parsed?.host ?? host
  })
  const cardKey = entry.card_key !== undefined ? publicKeyOf(resolvePath(folder, entry.card_key), problem) : undefined
  return {
    name,
    cardUrl,
    headers,
    capabilities: entry.capabilities,
    ...(entry.callers !== undefined ? { callers: entry.callers } : {}),
    timeoutS: entry.timeout ?? DEFAULT_CALL_TIMEOUT_S,
    allowedHosts,
    ...(entry.require_approval === true ? { requireApproval: true as const } : {}),
    ...(cardKey !== undefined ? { cardKey } : {})
  }
}

/** The public key in the file at `path` (PEM, or a JWK), or a problem saying why there is none. A private key is refused: the agents file should not hold a secret it does not need. */
function publicKeyOf (path: string, problem: (p: string) => void): KeyObject | undefined {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    problem(`card_key: ${path} cannot be read: ${(err as Error).message}`)
    return undefined
  }
  try {
    if (text.trimStart().startsWith('-----BEGIN')) {
      if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(text)) throw new Error('it holds a private key: give the public key (openssl pkey -pubout)')
      return createPublicKey({ key: text, format: 'pem' })
    }
    const jwk = JSON.parse(text) as JsonWebKey
    if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk) || 'keys' in jwk) throw new Error('neither a PEM public key nor one JWK object')
    if ('d' in jwk) throw new Error('it holds a private key: give the public JWK (without "d")')
    return createPublicKey({ key: jwk, format: 'jwk' })
  } catch (err) {
    problem(`card_key: ${path} is not a public key (PEM or JWK): ${(err as Error).message}`)
    return undefined
  }
}

/** A schema issue as a line of the boot error; a name the patterns refuse is said as such (the validator calls it an additional property). */
function readable (issue: { path: string, message: string }): string {
  if (issue.message === 'must NOT have additional properties') {
    if (/^\/agents\/[^/]+$/.test(issue.path)) return `${issue.path}: an agent's name is letters, digits, "_", "." and "-", starting with a letter or digit (at most 128)`
    if (/^\/agents\/[^/]+\/headers\/[^/]+$/.test(issue.path)) return `${issue.path}: not a header name`
  }
  return `${issue.path}: ${issue.message}`
}

function parseUrl (text: string): URL | undefined {
  try {
    return new URL(text)
  } catch {
    return undefined
  }
}
