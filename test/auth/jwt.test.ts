import t from 'tap'
import { createHmac, createSign, generateKeyPairSync, sign as edSign, type KeyObject } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { loadConfig } from '../../src/config.js'
import { refusalOf } from '../../src/auth/jwt.js'
import { buildApp } from '../../src/app.js'
import { AGENTS, build, envelope, tempDataDir } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'

const SECRET = 'a-shared-secret-of-at-least-32-characters'
const ISS = 'https://id.example.test'
const AUD = 'agent-host'
const JWT_ENV = { AUTH_MODE: 'jwt', JWT_SECRET: SECRET, JWT_ISSUER: ISS, JWT_AUDIENCE: AUD, WORKERS_PER_TYPE: '0' }

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
const now = (): number => Math.floor(Date.now() / 1000)

/** Claims of a token that should pass: override or drop (undefined) any of them. */
function claims (over: Record<string, unknown> = {}): Record<string, unknown> {
  const base: Record<string, unknown> = { iss: ISS, aud: AUD, sub: 'alice', exp: now() + 300, iat: now(), scope: 'agents:read assist:invoke sessions:read' }
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) delete base[k]
    else base[k] = v
  }
  return base
}

/** Mint a JWT with node:crypto alone, so the verifier under test is not also the signer. */
function mint (payload: Record<string, unknown>, options: { alg?: string, kid?: string, secret?: string, key?: KeyObject } = {}): string {
  const alg = options.alg ?? 'HS256'
  const input = `${b64({ alg, typ: 'JWT', ...(options.kid !== undefined ? { kid: options.kid } : {}) })}.${b64(payload)}`
  let signature: Buffer
  if (alg === 'none') signature = Buffer.alloc(0)
  else if (alg.startsWith('HS')) signature = createHmac(`sha${alg.slice(2)}`, options.secret ?? SECRET).update(input).digest()
  else if (alg === 'EdDSA') signature = edSign(null, Buffer.from(input), options.key as KeyObject)
  else if (alg.startsWith('ES')) signature = createSign('SHA256').update(input).sign({ key: options.key as KeyObject, dsaEncoding: 'ieee-p1363' })
  else signature = createSign('RSA-SHA256').update(input).sign(options.key as KeyObject)
  return `${input}.${signature.toString('base64url')}`
}

const bearer = (token: string): { authorization: string } => ({ authorization: `Bearer ${token}` })

t.test('HS256: a good token passes; each bad one is a 401 naming why, and audited', async (t) => {
  const app = await build(t, JWT_ENV)
  const ok = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims())) })
  t.equal(ok.statusCode, 200, 'a token with the scope')

  const cases: Array<[string, string, RegExp, string]> = [
    ['no token', '', /Bearer/, 'missing'],
    ['signed with another secret', mint(claims(), { secret: 'another-secret-that-is-also-32-chars-long' }), /signature/i, 'invalid'],
    ['expired', mint(claims({ exp: now() - 60 })), /expired/, 'expired'],
    ['not yet valid (nbf)', mint(claims({ nbf: now() + 120 })), /not valid yet/, 'not_yet_valid'],
    ['another issuer', mint(claims({ iss: 'https://evil.example.test' })), /iss/, 'invalid'],
    ['another audience', mint(claims({ aud: 'some-other-service' })), /aud/, 'invalid'],
    ['no subject', mint(claims({ sub: undefined })), /sub/, 'invalid'],
    ['only two parts', 'abc.def', /malformed/, 'invalid'],
    ['no expiry', mint(claims({ exp: undefined })), /exp/, 'invalid'],
    ['no issuer (issue 27, fault 6: was accepted)', mint(claims({ iss: undefined })), /iss/, 'invalid'],
    ['no audience (issue 27, fault 6: was accepted)', mint(claims({ aud: undefined })), /aud/, 'invalid'],
    ['an empty audience list', mint(claims({ aud: [] })), /aud/, 'invalid'],
    ['an audience list naming another service only', mint(claims({ aud: ['some-other-service'] })), /aud/, 'invalid'],
    ['alg none', mint(claims(), { alg: 'none' }), /not signed/, 'unsigned'],
    ['HS512 where HS256 is required', mint(claims(), { alg: 'HS512' }), /algorithm/, 'invalid'],
    ['not a JWT', 'not.a.jwt', /header is not a valid/, 'invalid'],
    ['a JWT with a broken header', `${Buffer.from('{"alg":').toString('base64url')}.${b64(claims())}.sig`, /header is not a valid/, 'invalid']
  ]
  for (const [name, token, message, reason] of cases) {
    const res = await app.inject({ url: '/v1/agents', headers: token === '' ? {} : bearer(token) })
    t.equal(res.statusCode, 401, name)
    t.match(checkErrorBody(res.json()), { code: 'AH_ERR_AUTH_REQUIRED', message }, name)
    t.match((await app.audit.list({ action: 'auth.deny', limit: 1000 })).at(-1), { success: false, details: { reason, scope: 'agents:read' } }, `${name}: audited as ${reason}`)
    t.notMatch(JSON.stringify(await app.audit.list({ action: 'auth.deny', limit: 1000 })), token === '' ? /^$/ : token, `${name}: the token is not in the audit log`)
  }

  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ aud: ['some-other-service', AUD] }))) })).statusCode, 200, 'an audience list naming this service passes')

  const skewed = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ exp: now() - 2 }))) })
  t.equal(skewed.statusCode, 200, 'expired 2 s ago passes within JWT_CLOCK_TOLERANCE_MS (5 s)')
})

t.test('JWT identity: scopes from scope or scp, agents from agents, sessions owned by the subject', async (t) => {
  const app = await build(t, JWT_ENV)
  const noScope = await app.inject({ url: '/v1/audit', headers: bearer(mint(claims())) })
  t.equal(noScope.statusCode, 403)
  t.match(checkErrorBody(noScope.json()).message, /"audit:read"/)
  t.equal((await app.inject({ url: '/v1/audit', headers: bearer(mint(claims({ scope: undefined, scp: ['audit:read', 'made:up'] }))) })).statusCode, 200, 'scp as a list')
  t.equal((await app.inject({ url: '/v1/audit', headers: bearer(mint(claims({ scope: 'admin' }))) })).statusCode, 200, 'admin holds every scope')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ scope: 42 }))) })).statusCode, 401, 'a scope claim of the wrong type is refused')

  const limited = await app.inject({ method: 'POST', url: '/v1/assist', headers: bearer(mint(claims({ agents: ['echo-stream'] }))), payload: envelope(AGENTS.echo) })
  t.equal(limited.statusCode, 403, 'the agents claim limits what the token may invoke')
  t.match(checkErrorBody(limited.json()).message, /may not invoke agent "echo"/)

  const body = envelope(AGENTS.echo, { query: 'mine' })
  const alice = bearer(mint(claims({ name: 'Alice A.' })))
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...alice, accept: 'application/json' }, payload: body })).statusCode, 200)
  const url = `/v1/sessions/${body.context.session_id}/history`
  t.equal((await app.inject({ url, headers: alice })).statusCode, 200, 'the subject reads its own session')
  t.equal((await app.inject({ url, headers: bearer(mint(claims({ sub: 'bob' }))) })).statusCode, 404, 'another subject cannot see it')
  const again = await app.inject({ method: 'POST', url: '/v1/assist', headers: bearer(mint(claims({ sub: 'bob' }))), payload: envelope(AGENTS.echo, { query: 'x' }, { sessionId: body.context.session_id }) })
  t.equal(again.statusCode, 404, 'nor write to it')
  t.equal((await app.inject({ url, headers: bearer(mint(claims({ iat: now() - 10 }))) })).statusCode, 200, 'a new token of the same subject still owns it')
})

t.test('JWT tenants: the tenant claim (JWT_TENANT_CLAIM) makes the subject a principal of that tenant, whose things another tenant\'s same subject never sees', async (t) => {
  const app = await build(t, { ...JWT_ENV, JWT_TENANT_CLAIM: 'org' })
  const acme = bearer(mint(claims({ org: 'acme' })))
  const body = envelope(AGENTS.echo, { query: 'mine' })
  t.equal((await app.inject({ method: 'POST', url: '/v1/assist', headers: { ...acme, accept: 'application/json' }, payload: body })).statusCode, 200)
  t.match(await app.audit.list({ action: 'assist', request_id: body.request_id }), [{ actor: 'tenant:acme/jwt:alice' }], 'the principal names its tenant')
  const url = `/v1/sessions/${body.context.session_id}/history`
  t.equal((await app.inject({ url, headers: acme })).statusCode, 200)
  t.equal((await app.inject({ url, headers: bearer(mint(claims({ org: 'globex' }))) })).statusCode, 404, 'the same subject in another tenant is another principal')
  t.equal((await app.inject({ url, headers: bearer(mint(claims())) })).statusCode, 404, 'and in the default tenant (no claim)')
  t.equal((await app.inject({ url, headers: bearer(mint(claims({ sub: 'carol', org: 'acme', scope: 'tenant-admin' }))) })).statusCode, 200, 'the tenant\'s admin sees it')
  t.equal((await app.inject({ url, headers: bearer(mint(claims({ sub: 'carol', org: 'globex', scope: 'tenant-admin' }))) })).statusCode, 404, 'another tenant\'s admin does not')
  t.equal((await app.inject({ url: '/metrics', headers: bearer(mint(claims({ sub: 'carol', org: 'acme', scope: 'tenant-admin' }))) })).statusCode, 403, 'a tenant\'s admin is not the host\'s')
})

t.test('JWT claim types are enforced: a claim of the wrong type is a 401 naming it, never a guess (issue 16, fault 5)', async (t) => {
  const app = await build(t, JWT_ENV)
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['agents as a string (was: no restriction)', { agents: 'echo' }, /agents must be an array/],
    ['agents with a number in it', { agents: ['echo', 7] }, /agents must be an array/],
    ['sub as an object (was: jwt:[object Object], shared by every such token)', { sub: { id: 'alice' } }, /sub must be a non-empty string/],
    ['sub empty', { sub: '' }, /sub must be a non-empty string/],
    ['sub blank', { sub: '   ' }, /sub must be a non-empty string/],
    ['sub a number', { sub: 42 }, /sub must be a non-empty string/],
    ['sub too long', { sub: 'x'.repeat(257) }, /at most 256/],
    ['scp not a list', { scope: undefined, scp: 'admin' }, /scp must be an array/],
    ['tenant not a name', { tenant: 'Acme Corp' }, /tenant must be a tenant's name/],
    ['tenant a list', { tenant: ['acme'] }, /tenant must be a tenant's name/]
  ]
  for (const [name, over, message] of cases) {
    const res = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(over))) })
    t.equal(res.statusCode, 401, name)
    t.match(checkErrorBody(res.json()), { code: 'AH_ERR_AUTH_REQUIRED', message }, name)
    t.match((await app.audit.list({ action: 'auth.deny', limit: 1000 })).at(-1), { actor: 'unauthenticated', details: { reason: 'bad_claim' } }, `${name}: audited`)
  }
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ agents: [] }))) })).statusCode, 200, 'an empty agents list is a list (it may invoke none)')
})

t.test('JWKS file: RS256, ES256 and EdDSA by kid; unknown kid, forged HS256 and key rotation', async (t) => {
  const dir = tempDataDir(t)
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const ed = generateKeyPairSync('ed25519')
  const jwk = (key: KeyObject, kid: string): Record<string, unknown> => ({ ...key.export({ format: 'jwk' }), kid })
  const file = join(dir, 'jwks.json')
  writeFileSync(file, JSON.stringify({ keys: [jwk(rsa.publicKey, 'rsa-1'), jwk(ec.publicKey, 'ec-1'), jwk(ed.publicKey, 'ed-1')] }))
  const app = await build(t, { ...JWT_ENV, JWT_SECRET: '', JWT_JWKS_FILE: file })

  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-1', key: rsa.privateKey })) })).statusCode, 200, 'RS256')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'ES256', kid: 'ec-1', key: ec.privateKey })) })).statusCode, 200, 'ES256')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'EdDSA', kid: 'ed-1', key: ed.privateKey })) })).statusCode, 200, 'EdDSA')

  // docs/deploying.md's call with a token, pasted with the reader's host and an RS256 token from their identity provider
  const [, , pasted] = docBlocks('docs/deploying.md', '## Keys and tokens')
  const placeholder = /Bearer (eyJ[\w-]+)\.\.\."/.exec(pasted as string)?.[1] as string
  t.match(Buffer.from(placeholder, 'base64url').toString(), /^\{"alg":"RS256","kid":/, 'the page\'s token is an RS256 one with a kid')
  await app.listen({ host: '127.0.0.1', port: 0 })
  const local = (pasted as string).replace('http://host:3000', `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`).replace(`${placeholder}...`, mint(claims(), { alg: 'RS256', kid: 'rsa-1', key: rsa.privateKey }))
  t.ok((JSON.parse(await runShell(local)) as { agents: unknown[] }).agents.length > 0, 'the page\'s call, pasted with a signed token, reads the agents')

  const wrongKey = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-1', key: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey })) })
  t.equal(wrongKey.statusCode, 401, 'signed by a key that is not the one named')
  const unknown = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-9', key: rsa.privateKey })) })
  t.equal(unknown.statusCode, 401)
  t.match(checkErrorBody(unknown.json()).message, /"rsa-9" is not one of ours/)
  t.match((await app.audit.list({ action: 'auth.deny', limit: 100 })).at(-1), { details: { reason: 'unknown_key' } })
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', key: rsa.privateKey })) })).statusCode, 401, 'no kid')
  for (const claim of ['iss', 'aud']) {
    const without = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ [claim]: undefined }), { alg: 'RS256', kid: 'rsa-1', key: rsa.privateKey })) })
    t.equal(without.statusCode, 401, `a well-signed token without ${claim} is refused (issue 27, fault 6)`)
    t.match(checkErrorBody(without.json()).message, new RegExp(claim))
  }

  const pem = rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString()
  const forged = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'HS256', kid: 'rsa-1', secret: pem })) })
  t.equal(forged.statusCode, 401, 'HS256 signed with the public key (algorithm confusion) is refused')

  const rotated = generateKeyPairSync('rsa', { modulusLength: 2048 })
  await sleep(20) // a new mtime
  writeFileSync(file, JSON.stringify({ keys: [jwk(rotated.publicKey, 'rsa-2')] }))
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-2', key: rotated.privateKey })) })).statusCode, 200, 'a key added to the file is picked up')
  writeFileSync(file, '{"keys": [')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-3', key: rotated.privateKey })) })).statusCode, 401, 'a half-written file during rotation refuses the new kid')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-2', key: rotated.privateKey })) })).statusCode, 200, '... and keeps the keys it had')
  rmSync(file)
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-4', key: rotated.privateKey })) })).statusCode, 401, 'a removed file: unknown keys are refused')
  t.equal((await app.inject({ url: '/v1/agents', headers: bearer(mint(claims(), { alg: 'RS256', kid: 'rsa-2', key: rotated.privateKey })) })).statusCode, 200, '... and known ones still pass')
})

t.test('JWT configuration is checked at boot', async (t) => {
  const dir = tempDataDir(t)
  const bad = (env: Record<string, string>, message: RegExp, name: string): void => {
    t.throws(() => loadConfig({ DATA_DIR: dir, ...JWT_ENV, ...env }), { code: 'AH_ERR_CONFIG_INVALID', message }, name)
  }
  bad({ JWT_SECRET: '' }, /exactly one of env\/JWT_SECRET/, 'neither secret nor JWKS')
  bad({ JWT_JWKS_FILE: '/x.json' }, /exactly one of env\/JWT_SECRET/, 'both')
  bad({ JWT_SECRET: 'short' }, /32 or more/, 'a short secret')
  bad({ JWT_ISSUER: '' }, /JWT_ISSUER and env\/JWT_AUDIENCE/, 'no issuer')
  bad({ JWT_AUDIENCE: '' }, /JWT_ISSUER and env\/JWT_AUDIENCE/, 'no audience')

  const files: Array<[string, string, RegExp]> = [
    ['missing', '', /cannot be read/],
    ['not JSON', '{', /cannot be read/],
    ['no keys', '{"keys": []}', /must be a JWKS/],
    ['a key without kid', JSON.stringify({ keys: [{ kty: 'EC', crv: 'P-256', x: 'a', y: 'b' }] }), /needs a "kid"/],
    ['a shared secret', JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0', kid: 'h' }] }), /use JWT_SECRET/],
    ['a broken key', JSON.stringify({ keys: [{ kty: 'EC', crv: 'P-256', x: 'a', y: 'b', kid: 'e' }] }), /not a usable public key/]
  ]
  for (const [name, text, message] of files) {
    const file = join(dir, `${name.replace(/\W/g, '-')}.json`)
    if (text !== '') writeFileSync(file, text)
    const config = loadConfig({ DATA_DIR: dir, ...JWT_ENV, JWT_SECRET: '', JWT_JWKS_FILE: file, LOG_LEVEL: 'silent' })
    await t.rejects(buildApp(config), { code: 'AH_ERR_CONFIG_INVALID', message }, `JWKS file: ${name}`)
  }
})

t.test('a token that breaks the verifier is refused, not a 500', async (t) => {
  const app = await build(t, JWT_ENV)
  // fast-jwt throws a RangeError formatting a date past the year 275760
  const res = await app.inject({ url: '/v1/agents', headers: bearer(mint(claims({ nbf: 8640000000005 }))) })
  t.equal(res.statusCode, 401)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_AUTH_REQUIRED', message: /the token is not valid/ })
  t.same(refusalOf(new TypeError('x')), { reason: 'invalid', message: 'the token is not valid' })
})
