import t, { type Test } from 'tap'
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { canonicalizeAgentCard, verifyAgentCardSignature, type AgentCard } from '@a2a-js/sdk'
import { base64url, calculateJwkThumbprint, decodeProtectedHeader, flattenedVerify, type JWK } from 'jose'
import { CardSigner, cardPayload } from '../../src/a2a/card-signature.js'
import { loadA2AAgents } from '../../src/a2a-client/agents-file.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'
import { canonicalJson } from '../../src/storage/canonical-json.js'
import { AGENTS, build, tempDataDir, type Teardown } from '../helper.js'

// Signed agent cards (A2A v1.0 §8.4): the cards this server serves carry a detached JWS over their
// canonical JSON. Each signature is checked here with jose and the public key derived from the
// private key file, independently of the server's code, over the canonical JSON of what the client got.

/** A fresh key pair written as a PKCS#8 PEM file (`pem`) or a private JWK file (`jwk`); its file and public key. */
function keyFile (t: Teardown, type: 'ec' | 'ed25519', as: 'pem' | 'jwk'): { path: string, publicKey: KeyObject } {
  const { privateKey, publicKey } = type === 'ec' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('ed25519')
  const path = join(tempDataDir(t), as === 'pem' ? 'card-key.pem' : 'card-key.jwk')
  writeFileSync(path, as === 'pem' ? privateKey.export({ format: 'pem', type: 'pkcs8' }) : JSON.stringify(privateKey.export({ format: 'jwk' })))
  return { path, publicKey }
}

/** Check `card`'s one signature with `publicKey` over the canonical JSON of the card without `signatures`; its protected header. */
async function verified (t: Test, card: Record<string, unknown>, publicKey: KeyObject): Promise<Record<string, unknown>> {
  const signatures = card.signatures as Array<{ protected: string, signature: string }>
  t.equal(signatures.length, 1, 'one signature')
  const { signatures: _, ...unsigned } = card
  const payload = canonicalJson(unsigned)
  t.equal(canonicalizeAgentCard(card as unknown as AgentCard), payload, 'the a2a SDKs\' canonical form of the card is the same text')
  const result = await flattenedVerify({ ...signatures[0] as { protected: string, signature: string }, payload: base64url.encode(payload) }, publicKey)
  await verifyAgentCardSignature(async () => publicKey)(card as unknown as AgentCard)
  return result.protectedHeader as Record<string, unknown>
}

for (const [type, as, alg] of [['ec', 'pem', 'ES256'], ['ed25519', 'jwk', 'EdDSA']] as const) {
  t.test(`an ${type} key (${as} file): every served card carries a ${alg} signature over its canonical JSON, kid the key's thumbprint`, async (t) => {
    const { path, publicKey } = keyFile(t, type, as)
    const app = await build(t, { A2A_CARD_SIGNING_KEY_FILE: path, AUTH_MODE: 'apikey', API_KEYS: JSON.stringify([{ name: 'k', key: 'k'.repeat(32), scopes: ['assist:invoke'] }]) })
    const kid = await calculateJwkThumbprint(publicKey.export({ format: 'jwk' }) as JWK)
    for (const url of [`/a2a/${AGENTS.echo}/.well-known/agent-card.json`, '/.well-known/agent-card.json']) {
      const res = await app.inject({ url })
      t.equal(res.statusCode, 200, url)
      const card = res.json<Record<string, unknown>>()
      t.ok(card.securitySchemes, 'a card with a security scheme (the SDK\'s canonical form keeps it only from JSON)')
      t.same(await verified(t, card, publicKey), { alg, typ: 'JOSE', kid }, `${url}: the protected header`)
      const tampered: Record<string, unknown> = { ...card, name: 'someone else' }
      const { signatures: _, ...unsigned } = tampered
      await t.rejects(flattenedVerify({ ...(card.signatures as Array<{ protected: string, signature: string }>)[0] as { protected: string, signature: string }, payload: base64url.encode(canonicalJson(unsigned)) }, publicKey), 'a changed card does not verify')
    }
  })
}

t.test('A2A_CARD_SIGNING_KID names the key; a card is signed once per origin: served again, its signature is the one made first', async (t) => {
  const { path, publicKey } = keyFile(t, 'ec', 'pem')
  const app = await build(t, { A2A_CARD_SIGNING_KEY_FILE: path, A2A_CARD_SIGNING_KID: 'cards-2026' })
  const get = async (host: string): Promise<Record<string, unknown>> => (await app.inject({ url: `/a2a/${AGENTS.echo}/.well-known/agent-card.json`, headers: { host } })).json()
  const first = await get('localhost:3000')
  t.match(await verified(t, first, publicKey), { kid: 'cards-2026' })
  // ES256 signatures are randomised: an equal signature is the kept one
  t.same((await get('localhost:3000')).signatures, first.signatures, 'the same card: the kept signature')
  const other = await get('127.0.0.1:3000')
  t.not((other.supportedInterfaces as Array<{ url: string }>)[0]?.url, (first.supportedInterfaces as Array<{ url: string }>)[0]?.url, 'another origin, another card')
  t.notSame(other.signatures, first.signatures)
  t.match(await verified(t, other, publicKey), { kid: 'cards-2026' })
})

t.test('without a key, cards are served unsigned, as before', async (t) => {
  const app = await build(t)
  const card = (await app.inject({ url: `/a2a/${AGENTS.echo}/.well-known/agent-card.json` })).json<Record<string, unknown>>()
  t.equal(card.name, 'echo')
  t.notOk('signatures' in card)
})

t.test('sign: a signature already on the card is kept; past 256 cards the oldest signature is forgotten, not the newest', async (t) => {
  const { path, publicKey } = keyFile(t, 'ec', 'pem')
  const signer = await CardSigner.load(path)
  t.same(signer.publicJwk, { ...(publicKey.export({ format: 'jwk' }) as JWK), kid: signer.kid, alg: 'ES256', use: 'sig' }, 'the public JWK to pin')
  const earlier = { protected: 'e30', signature: 'AA' }
  const card = await signer.sign({ name: 'x', signatures: [earlier] } as Record<string, unknown>)
  t.same((card.signatures as unknown[])[0], earlier)
  const mine = (card.signatures as Array<{ protected: string, signature: string }>)[1] as { protected: string, signature: string }
  t.same(decodeProtectedHeader(mine), { alg: 'ES256', typ: 'JOSE', kid: signer.kid })
  await flattenedVerify({ ...mine, payload: base64url.encode(cardPayload({ name: 'x' })) }, publicKey)
  const signatureOf = async (n: number): Promise<unknown> => ((await signer.sign({ name: `card ${n}` })).signatures as unknown[])[0]
  const firsts = [await signatureOf(0), await signatureOf(1)]
  for (let n = 2; n <= 256; n++) await signatureOf(n)
  t.notSame(await signatureOf(0), firsts[0], 'the oldest was forgotten: signed anew')
  t.same(await signatureOf(256), await signatureOf(256), 'a recent one is kept')
})

t.test('a key file that cannot be read or cannot sign a card stops the boot, naming the setting and why', async (t) => {
  const dir = tempDataDir(t)
  const write = (name: string, text: string): string => { writeFileSync(join(dir, name), text); return join(dir, name) }
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const cases: Array<[string, string, RegExp]> = [
    ['missing', join(dir, 'nope.pem'), /cannot be read: ENOENT/],
    ['not a key', write('text.pem', 'hello'), /is not a private key \(PEM or JWK\)/],
    ['a JSON array', write('array.jwk', '[]'), /neither a PEM private key nor a JWK object/],
    ['a JWK set', write('set.jwk', JSON.stringify({ keys: [ec.privateKey.export({ format: 'jwk' })] })), /a JWK set: give one private JWK/],
    ['a public key', write('public.pem', ec.publicKey.export({ format: 'pem', type: 'spki' }) as string), /is not a private key/],
    ['a public JWK', write('public.jwk', JSON.stringify(createPublicKey(ec.privateKey).export({ format: 'jwk' }))), /is not a private key/],
    ['P-384', write('p384.pem', generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey.export({ format: 'pem', type: 'pkcs8' }) as string), /holds an EC key on secp384r1: use P-256 \(ES256\)/],
    ['RSA 1024', write('rsa.pem', generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'pem', type: 'pkcs8' }) as string), /holds an RSA key of 1024 bits: use 2048 or more/],
    ['X25519', write('x25519.pem', generateKeyPairSync('x25519').privateKey.export({ format: 'pem', type: 'pkcs8' }) as string), /holds a x25519 key: use an EC P-256 \(ES256\), Ed25519 \(EdDSA\) or RSA \(RS256\) key/]
  ]
  for (const [name, path, why] of cases) {
    await t.rejects(CardSigner.load(path), { code: 'AH_ERR_CONFIG_INVALID', message: why }, name)
    await t.rejects(CardSigner.load(path), { message: `env/A2A_CARD_SIGNING_KEY_FILE ${path}: ` }, `${name}: names the setting and the file`)
  }
  await t.rejects(build(t, { A2A_CARD_SIGNING_KEY_FILE: join(dir, 'text.pem') }), { code: 'AH_ERR_CONFIG_INVALID', message: /env\/A2A_CARD_SIGNING_KEY_FILE .*text\.pem: is not a private key/ }, 'the server does not start')
})

t.test('an RSA key signs RS256', async (t) => {
  const path = join(tempDataDir(t), 'rsa.pem')
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs1' }))
  const signer = await CardSigner.load(path)
  t.equal(signer.alg, 'RS256')
  t.match(await verified(t, await signer.sign({ name: 'r' }), publicKey), { alg: 'RS256' })
})

t.test('docs/a2a.md, "Signed agent cards": its openssl commands make the key the server signs with and the public key its agents file example pins', async (t) => {
  const dir = tempDataDir(t)
  const [keys] = docBlocks('docs/a2a.md', '### Signed agent cards')
  await runShell(keys as string, { cwd: dir })
  const publicKey = createPublicKey(readFileSync(join(dir, 'card-key.pub.pem'), 'utf8'))
  const app = await build(t, { A2A_CARD_SIGNING_KEY_FILE: join(dir, 'card-key.pem') })
  const card = (await app.inject({ url: `/a2a/${AGENTS.echo}/.well-known/agent-card.json` })).json<Record<string, unknown>>()
  t.match(await verified(t, card, publicKey), { alg: 'ES256', typ: 'JOSE' })
  const [example] = docBlocks('docs/a2a.md', '### Signed agent cards', 'json')
  mkdirSync(join(dir, 'keys'))
  writeFileSync(join(dir, 'keys', 'scanner.pub.pem'), readFileSync(join(dir, 'card-key.pub.pem')))
  writeFileSync(join(dir, 'a2a-agents.json'), example as string)
  const [scanner] = loadA2AAgents(join(dir, 'a2a-agents.json'), { SCANNER_TOKEN: 't' })
  t.ok(scanner?.cardKey?.equals(publicKey), 'card_key: the public key, relative to the agents file')
})
