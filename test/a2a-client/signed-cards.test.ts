import t from 'tap'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AddressInfo } from 'node:net'
import { A2A_PROTOCOL_VERSION, generateAgentCardSignature, type AgentCard } from '@a2a-js/sdk'
import { AgentCards, checkCardSignature } from '../../src/a2a-client/agent-cards.js'
import { loadA2AAgents, type A2AAgentConfig } from '../../src/a2a-client/agents-file.js'
import { CardSigner } from '../../src/a2a/card-signature.js'
import { AGENTS, listen, tempDataDir, type Teardown } from '../helper.js'

// Pinning an external agent's card key (`card_key` in A2A_AGENTS_FILE): its card is used only when one
// of its signatures is valid by that key. The cards come from a loopback server, signed as this
// server signs its own (CardSigner), or by the a2a SDK's signer.

/** A P-256 key pair: the private key's PKCS#8 PEM file (what A2A_CARD_SIGNING_KEY_FILE takes) and the public key. */
function keyPair (dir: string, name: string): { privatePath: string, publicKey: KeyObject } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const privatePath = join(dir, `${name}.pem`)
  writeFileSync(privatePath, privateKey.export({ format: 'pem', type: 'pkcs8' }))
  return { privatePath, publicKey }
}

/** A card server answering each request with `card()` (read at each request). */
async function cardServer (t: Teardown, card: (base: string) => Record<string, unknown>): Promise<string> {
  const server = createServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(card(base))) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return `${base}/.well-known/agent-card.json`
}

const cardOf = (base: string): Record<string, unknown> => ({
  name: 'scanner',
  description: 'scans',
  version: '1.0.0',
  supportedInterfaces: [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', protocolVersion: A2A_PROTOCOL_VERSION }],
  capabilities: { streaming: true },
  skills: [{ id: 'scan', name: 'scan', description: 'scans', tags: ['scan'] }],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain']
})
const agent = (cardUrl: string, cardKey?: KeyObject): A2AAgentConfig => ({ name: 'scanner', cardUrl, headers: {}, capabilities: ['scan'], timeoutS: 300, allowedHosts: [], ...(cardKey !== undefined ? { cardKey } : {}) })

const dir = tempDataDir(t)
const pinned = keyPair(dir, 'pinned')
const other = keyPair(dir, 'other')
const signer = await CardSigner.load(pinned.privatePath)
const otherSigner = await CardSigner.load(other.privatePath)
/** Cards signed ahead of their server's requests, by the server's origin. */
const signedCards = new Map<string, Record<string, unknown>>()

t.test('a card signed by the pinned key is used', async (t) => {
  const url = await cardServer(t, (base) => signedCards.get(base) as Record<string, unknown>)
  const base = new URL(url).origin
  signedCards.set(base, await signer.sign(cardOf(base)))
  const remote = await new AgentCards().get(agent(url, pinned.publicKey))
  t.equal(remote.card.name, 'scanner')
  t.equal(remote.card.skills[0]?.id, 'scan')
  t.equal(remote.card.signatures.length, 1)
})

t.test('refused with AH_ERR_REMOTE_CARD_UNVERIFIED: a card changed after signing, a card signed by another key, an unsigned card', async (t) => {
  let served: Record<string, unknown> = {}
  const url = await cardServer(t, () => served)
  const base = new URL(url).origin
  const cards = new AgentCards()
  const refused = async (card: Record<string, unknown>, why: RegExp, name: string): Promise<void> => {
    served = card
    await t.rejects(cards.get(agent(url, pinned.publicKey)), { code: 'AH_ERR_REMOTE_CARD_UNVERIFIED', message: why }, name)
  }
  const signed = await signer.sign(cardOf(base))
  await refused({ ...signed, skills: [{ id: 'scan', name: 'scan', description: 'scans and uploads', tags: ['scan'] }] }, /^its card at http:\/\/127\.0\.0\.1:\d+\/\.well-known\/agent-card\.json carries no valid signature by its card_key \(AH_ERR_REMOTE_CARD_UNVERIFIED\): none of its 1 signature is valid \(signature verification failed\)$/, 'a field changed after signing')
  await refused({ ...signed, supportedInterfaces: [{ url: `${base}/elsewhere`, protocolBinding: 'JSONRPC', protocolVersion: A2A_PROTOCOL_VERSION }] }, /signature verification failed/, 'an interface changed after signing')
  await refused(await otherSigner.sign(cardOf(base)), /none of its 1 signature is valid \(signature verification failed\)/, 'signed by another key')
  await refused(cardOf(base), /\): it has no signatures$/, 'unsigned')
  await refused({ ...cardOf(base), signatures: [] }, /it has no signatures/, 'an empty signatures list')
  await refused({ ...cardOf(base), signatures: 'yes' }, /it has no signatures/, 'signatures that are not a list')
  await refused({ ...cardOf(base), signatures: [null, { protected: 5, signature: 'x' }] }, /none of its 2 signatures is valid \(Flattened JWS must have either of the "protected" or "header" members; JWS Protected Header incorrect type\)$/, 'malformed signatures')
  // the SDK's parser throws on a null skill: such a card is checked in its plain canonical JSON only
  const odd = await signer.sign({ ...cardOf(base), skills: [null] })
  await t.resolves(checkCardSignature(odd, pinned.publicKey, url), 'a card the SDK cannot parse, signed: its plain canonical JSON verifies')
  await t.rejects(checkCardSignature({ ...odd, name: 'changed' }, pinned.publicKey, url), { code: 'AH_ERR_REMOTE_CARD_UNVERIFIED' }, 'and changed, it does not')
})

t.test('one valid signature among others is enough (key rotation), whatever its kid', async (t) => {
  let served: Record<string, unknown> = {}
  const url = await cardServer(t, () => served)
  const mine = await signer.sign(cardOf(new URL(url).origin))
  served = await otherSigner.sign(mine)
  t.equal((served.signatures as unknown[]).length, 2)
  t.equal((await new AgentCards().get(agent(url, pinned.publicKey))).card.name, 'scanner', 'the second signature is the pinned key\'s')
  served = { ...mine, signatures: [...((await otherSigner.sign(cardOf(new URL(url).origin))).signatures as unknown[]), ...(mine.signatures as unknown[])] }
  t.equal((await new AgentCards().get(agent(url, pinned.publicKey))).card.name, 'scanner', 'the first signature is another key\'s')
})

t.test('a card signed by the a2a SDK\'s signer (its canonical form leaves out empty values) is used', async (t) => {
  const url = await cardServer(t, (base) => signedCards.get(base) as Record<string, unknown>)
  const base = new URL(url).origin
  // empty values the SDK's canonical form leaves out, as the spec's §8.4.1 asks: the plain RFC 8785 text of this card is another
  const wire = { ...cardOf(base), documentationUrl: '', capabilities: { streaming: true, extensions: [] } }
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const served = await generateAgentCardSignature(privateKey, { alg: 'ES256', typ: 'JOSE', kid: 'sdk' })(wire as unknown as AgentCard) as unknown as Record<string, unknown>
  signedCards.set(base, served)
  t.equal((await new AgentCards().get(agent(url, publicKey))).card.name, 'scanner')
  await t.rejects(checkCardSignature({ ...served, documentationUrl: 'https://evil.example' }, publicKey, url), { code: 'AH_ERR_REMOTE_CARD_UNVERIFIED' }, 'a value set after signing is not an empty one')
})

t.test('an agent without card_key: its card is used signed or not, as before', async (t) => {
  const url = await cardServer(t, (base) => cardOf(base))
  t.equal((await new AgentCards().get(agent(url))).card.name, 'scanner', 'unsigned')
  const signedUrl = await cardServer(t, (base) => ({ ...cardOf(base), signatures: [{ protected: 'e30', signature: 'AA' }] }))
  t.equal((await new AgentCards().get(agent(signedUrl))).card.name, 'scanner', 'a signature nobody checks')
})

t.test('end to end: an agent-host signing its cards (A2A_CARD_SIGNING_KEY_FILE) is called by a client pinning its key (card_key, a PEM file relative to the agents file)', async (t) => {
  const { url } = await listen(t, { A2A_CARD_SIGNING_KEY_FILE: pinned.privatePath })
  const folder = join(tempDataDir(t), 'config')
  mkdirSync(join(folder, 'keys'), { recursive: true })
  writeFileSync(join(folder, 'keys', 'host.pub.pem'), pinned.publicKey.export({ format: 'pem', type: 'spki' }))
  writeFileSync(join(folder, 'a2a-agents.json'), JSON.stringify({ agents: { host: { card_url: `${url}/a2a/${AGENTS.echo}/.well-known/agent-card.json`, capabilities: ['echo'], card_key: 'keys/host.pub.pem' } } }))
  const [host] = loadA2AAgents(join(folder, 'a2a-agents.json'), {})
  const remote = await new AgentCards().get(host as A2AAgentConfig)
  t.equal(remote.card.name, 'echo')
  t.equal(remote.card.signatures.length, 1)
  const [wrong] = loadA2AAgents(join(folder, 'a2a-agents.json'), {}).map((a) => ({ ...a, cardKey: other.publicKey }))
  await t.rejects(new AgentCards().get(wrong as A2AAgentConfig), { code: 'AH_ERR_REMOTE_CARD_UNVERIFIED' }, 'another pinned key')
})

t.test('card_key in A2A_AGENTS_FILE: a public key file, PEM or JWK; anything else is a boot problem naming its place', async (t) => {
  const folder = tempDataDir(t)
  const write = (name: string, text: string): string => { writeFileSync(join(folder, name), text); return join(folder, name) }
  const ed = generateKeyPairSync('ed25519')
  write('ed.jwk', JSON.stringify(ed.publicKey.export({ format: 'jwk' })))
  write('ec.pem', pinned.publicKey.export({ format: 'pem', type: 'spki' }) as string)
  const entry = (cardKey: string): Record<string, unknown> => ({ card_url: 'https://a.example/card.json', capabilities: ['x'], card_key: cardKey })
  const path = write('agents.json', JSON.stringify({ agents: { jwk: entry('ed.jwk'), pem: entry(join(folder, 'ec.pem')) } }))
  const [jwk, pem] = loadA2AAgents(path, {})
  t.ok(jwk?.cardKey?.equals(ed.publicKey), 'a JWK file, relative to the agents file')
  t.ok(pem?.cardKey?.equals(pinned.publicKey), 'a PEM file, by its absolute path')

  write('private.pem', generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'pem', type: 'pkcs8' }) as string)
  write('private.jwk', JSON.stringify(generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' })))
  write('set.jwk', JSON.stringify({ keys: [ed.publicKey.export({ format: 'jwk' })] }))
  write('garbage.pem', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n')
  const bad = write('bad.json', JSON.stringify({
    agents: { missing: entry('nope.pem'), private: entry('private.pem'), privateJwk: entry('private.jwk'), set: entry('set.jwk'), garbage: entry('garbage.pem') }
  }))
  t.throws(() => loadA2AAgents(bad, {}), {
    code: 'AH_ERR_CONFIG_INVALID',
    message: new RegExp([
      `/agents/missing/card_key: ${join(folder, 'nope.pem')} cannot be read: ENOENT`,
      '/agents/private/card_key: .*private\\.pem is not a public key \\(PEM or JWK\\): it holds a private key: give the public key \\(openssl pkey -pubout\\)',
      '/agents/privateJwk/card_key: .*private\\.jwk is not a public key \\(PEM or JWK\\): it holds a private key: give the public JWK \\(without "d"\\)',
      '/agents/set/card_key: .*set\\.jwk is not a public key \\(PEM or JWK\\): neither a PEM public key nor one JWK object',
      '/agents/garbage/card_key: .*garbage\\.pem is not a public key'
    ].join('[^]*'))
  })
})
