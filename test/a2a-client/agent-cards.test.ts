import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { A2A_PROTOCOL_VERSION } from '@a2a-js/sdk'
import { AgentCards, freshness } from '../../src/a2a-client/agent-cards.js'
import type { A2AAgentConfig } from '../../src/a2a-client/agents-file.js'
import { interfaceRefusal } from '../../src/a2a-client/card-interfaces.js'

// Fetching and keeping agent cards: their HTTP cache headers, their ETag, what is refused. The
// server here answers card requests only (the calls themselves are tested against the SDK's server).

/** A card server: `answer` decides each response; `requests` counts them, `lastHeaders` keeps the last request's headers. */
async function cardServer (t: { teardown: (fn: () => unknown) => void }, answer: (req: IncomingMessage, res: ServerResponse, url: string) => void): Promise<{ url: string, requests: () => number, lastHeaders: () => IncomingMessage['headers'] }> {
  let requests = 0
  let last: IncomingMessage['headers'] = {}
  const server = createServer((req, res) => { requests++; last = req.headers; answer(req, res, base) })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { url: `${base}/.well-known/agent-card.json`, requests: () => requests, lastHeaders: () => last }
}

const card = (url: string): Record<string, unknown> => ({
  name: 'c',
  description: 'd',
  version: '1.0.0',
  supportedInterfaces: [{ url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
  capabilities: { streaming: true },
  skills: [{ id: 'echo', name: 'echo' }],
  defaultInputModes: [],
  defaultOutputModes: []
})
const agent = (cardUrl: string, more: Partial<A2AAgentConfig> = {}): A2AAgentConfig => ({ name: 'a', cardUrl, headers: { 'X-Key': 'k' }, capabilities: ['echo'], timeoutS: 300, allowedHosts: [], ...more })

t.test('freshness: max-age, no-store and no-cache, Expires, else the default, never past the maximum', async (t) => {
  const h = (headers: Record<string, string>): Headers => new Headers(headers)
  t.equal(freshness(h({ 'cache-control': 'public, max-age=30' }), 0, 60_000, 3_600_000), 30_000)
  t.equal(freshness(h({ 'cache-control': 'max-age=99999' }), 0, 60_000, 3_600_000), 3_600_000)
  t.equal(freshness(h({ 'cache-control': 'no-store' }), 0, 60_000, 3_600_000), 0)
  t.equal(freshness(h({ 'cache-control': 'No-Cache, max-age=30' }), 0, 60_000, 3_600_000), 0)
  t.equal(freshness(h({ expires: new Date(10_000).toUTCString() }), 4_000, 60_000, 3_600_000), 6_000)
  t.equal(freshness(h({ expires: 'not a date' }), 0, 60_000, 3_600_000), 0)
  t.equal(freshness(h({ expires: new Date(0).toUTCString() }), 5_000, 60_000, 3_600_000), 0, 'expired')
  t.equal(freshness(h({}), 0, 60_000, 3_600_000), 60_000)
})

t.test('a card is kept while fresh, then revalidated with its ETag; the agent\'s headers go with each request', async (t) => {
  let clock = 0
  const server = await cardServer(t, (req, res, base) => {
    if (req.headers['if-none-match'] === '"v1"') { res.writeHead(304, { etag: '"v1"', 'cache-control': 'max-age=10' }).end(); return }
    res.writeHead(200, { 'content-type': 'application/json', etag: '"v1"', 'cache-control': 'max-age=10' }).end(JSON.stringify(card(`${base}/rpc`)))
  })
  const cards = new AgentCards({ now: () => clock })
  const first = await cards.get(agent(server.url))
  t.equal(first.card.name, 'c')
  t.match(server.lastHeaders(), { 'x-key': 'k', 'a2a-version': A2A_PROTOCOL_VERSION, accept: 'application/json' })
  t.equal(await cards.get(agent(server.url)), first, 'fresh: kept')
  t.equal(server.requests(), 1)
  clock = 10_001
  t.equal(await cards.get(agent(server.url)), first, 'stale, then not modified: the same card')
  t.equal(server.requests(), 2)
  t.equal(server.lastHeaders()['if-none-match'], '"v1"')
  t.equal(await cards.get(agent(server.url)), first, 'fresh again')
  t.equal(server.requests(), 2)
  cards.clear()
  t.not(await cards.get(agent(server.url)), first, 'cleared: fetched anew')
})

t.test('a card that may not be kept, and has no ETag, is fetched for every call', async (t) => {
  const server = await cardServer(t, (_req, res, base) => { res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(card(`${base}/rpc`))) })
  const cards = new AgentCards()
  await cards.get(agent(server.url))
  await cards.get(agent(server.url))
  t.equal(server.requests(), 2)
})

t.test('calls at the same time share one fetch; one that gives up stops waiting, not the fetch', async (t) => {
  let release = (): void => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  const server = await cardServer(t, (_req, res, base) => { held.then(() => { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(card(`${base}/rpc`))) }, () => {}) })
  const cards = new AgentCards()
  const quitter = new AbortController()
  const a = cards.get(agent(server.url))
  const b = cards.get(agent(server.url), quitter.signal)
  const c = cards.get(agent(server.url), new AbortController().signal)
  quitter.abort(new Error('gave up'))
  await t.rejects(b, { message: 'gave up' })
  release()
  const [first, third] = await Promise.all([a, c])
  t.equal(first, third)
  t.equal(server.requests(), 1)
  const aborted = new AbortController()
  aborted.abort(new Error('before it began'))
  cards.clear()
  await t.rejects(cards.get(agent(server.url), aborted.signal), { message: 'before it began' })
})

t.test('what cannot be used as a card is refused with why, and not kept', async (t) => {
  const answers: Array<(res: ServerResponse, base: string) => void> = [
    (res) => { res.writeHead(500).end('broken') },
    (res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{ not json') },
    (res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('[1, 2]') },
    (res) => { res.writeHead(302, { location: 'http://example.com/card.json' }).end() },
    (res, base) => { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ...card(`${base}/rpc`), supportedInterfaces: [{ url: 'grpc.example.com:443', protocolBinding: 'GRPC', tenant: '', protocolVersion: '1.0' }] })) }
  ]
  let i = 0
  const server = await cardServer(t, (_req, res, base) => { (answers[i++] as (res: ServerResponse, base: string) => void)(res, base) })
  const cards = new AgentCards()
  await t.rejects(cards.get(agent(server.url)), { message: /could not be fetched from .*: HTTP 500$/ })
  await t.rejects(cards.get(agent(server.url)), { message: /is not JSON/ })
  await t.rejects(cards.get(agent(server.url)), { message: /is not an agent card \(not a JSON object\)/ })
  await t.rejects(cards.get(agent(server.url)), { message: /could not be fetched from .*redirect/ }, 'a redirect is not followed')
  await t.rejects(cards.get(agent(server.url)), { message: 'its card offers no JSONRPC or HTTP+JSON interface (A2A v1.0)' })
  t.equal(server.requests(), 5, 'none was kept')
})

t.test('interfaces: only http(s), no downgrade from https, and only the card\'s host or an allowed one', async (t) => {
  const withUrl = (url: string, binding = 'JSONRPC'): Parameters<typeof interfaceRefusal>[0] =>
    ({ supportedInterfaces: [{ url, protocolBinding: binding, tenant: '', protocolVersion: '1.0' }] }) as unknown as Parameters<typeof interfaceRefusal>[0]
  const cardUrl = 'https://agents.example.com/.well-known/agent-card.json'
  t.equal(interfaceRefusal(withUrl('https://agents.example.com/a2a'), cardUrl, []), undefined)
  t.equal(interfaceRefusal(withUrl('https://api.example.com/a2a', 'http+json'), cardUrl, ['api.example.com']), undefined, 'an allowed host; bindings in any case')
  t.match(interfaceRefusal(withUrl('https://api.example.com/a2a'), cardUrl, []), /another host \(api\.example\.com\) than the card's \(agents\.example\.com\)/)
  t.match(interfaceRefusal(withUrl('http://agents.example.com/a2a'), cardUrl, []), /fetched over https, names a plain http interface/)
  t.match(interfaceRefusal(withUrl('file:///etc/passwd'), cardUrl, []), /not http\(s\)/)
  t.match(interfaceRefusal(withUrl('::nonsense'), cardUrl, []), /not a URL/)
  t.match(interfaceRefusal({ supportedInterfaces: undefined } as unknown as Parameters<typeof interfaceRefusal>[0], cardUrl, []), /offers no JSONRPC or HTTP\+JSON interface/)
})
