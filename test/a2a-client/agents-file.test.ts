/* eslint-disable no-template-curly-in-string -- `${NAME}` is the file's own syntax for the environment */
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadA2AAgents } from '../../src/a2a-client/agents-file.js'
import { build, tempDataDir } from '../helper.js'

/** The file, written to a temporary folder; its path. */
function file (t: Parameters<typeof tempDataDir>[0], content: unknown): string {
  const path = join(tempDataDir(t), 'a2a-agents.json')
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content))
  return path
}

t.test('no file, no external agents', async (t) => {
  t.same(loadA2AAgents('', {}), [])
  t.same((await build(t)).a2aAgents.names, [], 'the default')
})

t.test('${PORT} in a card URL is the port this server listens on, set or not: a card of its own', async (t) => {
  const path = file(t, { agents: { self: { card_url: 'http://127.0.0.1:${PORT}/a2a/digest/.well-known/agent-card.json', capabilities: ['digest'] } } })
  t.equal(loadA2AAgents(path, { PORT: '4123' })[0]?.cardUrl, 'http://127.0.0.1:4123/a2a/digest/.well-known/agent-card.json')
  t.same((await build(t, { A2A_AGENTS_FILE: path })).a2aAgents.names, ['self'], 'PORT unset: the server gives the file its default port')
  const other = file(t, { agents: { far: { card_url: 'https://${CARD_HOST}/card.json', capabilities: ['x'] } } })
  await t.rejects(build(t, { A2A_AGENTS_FILE: other }), { message: /\/agents\/far\/card_url: \$\{CARD_HOST\} is not set in the server's environment/ }, 'another variable must be set')
})

t.test('an entry is read with its defaults, its credentials resolved from the environment given', async (t) => {
  const path = file(t, {
    agents: {
      scanner: {
        card_url: 'https://scanner.example.com/.well-known/agent-card.json',
        bearer_token: '${SCANNER_TOKEN}',
        headers: { 'X-Tenant': 'acme-${REGION}' },
        capabilities: ['scan', 'review'],
        callers: ['research'],
        timeout: 120,
        allowed_hosts: ['API.Scanner.example.com', '10.0.0.7:8443']
      },
      'test-gen': { card_url: 'http://127.0.0.1:9000/.well-known/agent-card.json', capabilities: ['generate_unit'] }
    }
  })
  const agents = loadA2AAgents(path, { SCANNER_TOKEN: 't0k3n', REGION: 'eu' })
  t.same(agents, [
    {
      name: 'scanner',
      cardUrl: 'https://scanner.example.com/.well-known/agent-card.json',
      headers: { 'X-Tenant': 'acme-eu', Authorization: 'Bearer t0k3n' },
      capabilities: ['scan', 'review'],
      callers: ['research'],
      timeoutS: 120,
      allowedHosts: ['api.scanner.example.com', '10.0.0.7:8443']
    },
    { name: 'test-gen', cardUrl: 'http://127.0.0.1:9000/.well-known/agent-card.json', headers: {}, capabilities: ['generate_unit'], timeoutS: 300, allowedHosts: [] }
  ])
  t.same(loadA2AAgents(path, { SCANNER_TOKEN: 't0k3n', REGION: 'eu' }), agents)
  t.same((await build(t, { A2A_AGENTS_FILE: path, SCANNER_TOKEN: 't0k3n', REGION: 'eu' })).a2aAgents.names, ['scanner', 'test-gen'], 'the server reads it with the environment its settings came from')
})

t.test('every problem of the file is reported, one line each, naming its place', async (t) => {
  const path = file(t, {
    agents: {
      a: {
        card_url: 'ftp://example.com/card.json',
        bearer_token: '${MISSING_TOKEN}',
        headers: { Authorization: 'Basic x', 'Content-Type': 'text/plain', 'X-Empty': '${EMPTY}' },
        capabilities: ['scan'],
        allowed_hosts: ['example.com/path', 'ok.example.com']
      },
      b: { card_url: 'https://user:pw@example.com/card.json', capabilities: ['scan'] },
      c: { card_url: 'not a url', capabilities: ['scan'] }
    }
  })
  const err = t.throws(() => loadA2AAgents(path, { EMPTY: '' })) as Error & { code: string }
  t.equal(err.code, 'AH_ERR_CONFIG_INVALID')
  const lines = err.message.split('\n')
  t.match(lines[0], new RegExp(`env/A2A_AGENTS_FILE ${path}:$`))
  t.same(lines.slice(1).map((l) => l.trim()), [
    '- /agents/a/card_url: must be an absolute http or https URL',
    '- /agents/a/headers/Content-Type: the A2A client sets this header itself',
    '- /agents/a/headers/X-Empty: ${EMPTY} is not set in the server\'s environment',
    '- /agents/a/bearer_token: give either bearer_token or an Authorization header, not both',
    '- /agents/a/bearer_token: ${MISSING_TOKEN} is not set in the server\'s environment',
    '- /agents/a/allowed_hosts/0: "example.com/path" must be a host name or address, with an optional :port',
    '- /agents/b/card_url: must not carry credentials (use bearer_token or headers)',
    '- /agents/c/card_url: must be an absolute http or https URL'
  ])
})

t.test('a file that breaks the format is refused with each failing path', async (t) => {
  const err = t.throws(() => loadA2AAgents(file(t, {
    agents: {
      x: { card_url: 'https://a/', capabilities: [], timeout: 0, extra: true, headers: { 'bad header': 'v' } },
      'bad name!': { card_url: 'https://a/', capabilities: ['x'] }
    },
    more: 1
  }), {})) as Error
  t.same(err.message.split('\n').slice(1).map((l) => l.trim()).sort(), [
    '- /more: must NOT have additional properties',
    '- /agents/bad name!: an agent\'s name is letters, digits, "_", "." and "-", starting with a letter or digit (at most 128)',
    '- /agents/x/extra: must NOT have additional properties',
    '- /agents/x/headers/bad header: not a header name',
    '- /agents/x/capabilities: must NOT have fewer than 1 items',
    '- /agents/x/timeout: must be >= 1'
  ].sort())
  t.match((t.throws(() => loadA2AAgents(file(t, { agents: { x: { capabilities: ['x'] } } }), {})) as Error).message, /\/agents\/x\/card_url: must have required property/)
})

t.test('a file that cannot be read, or is not JSON, is refused', async (t) => {
  t.throws(() => loadA2AAgents('/nonexistent/a2a.json', {}), { code: 'AH_ERR_CONFIG_INVALID', message: /A2A_AGENTS_FILE \/nonexistent\/a2a.json:\n {2}- cannot be read as JSON: ENOENT/ })
  t.throws(() => loadA2AAgents(file(t, '{ nope'), {}), { message: /cannot be read as JSON/ })
  await t.rejects(build(t, { A2A_AGENTS_FILE: file(t, '[]') }), { code: 'AH_ERR_CONFIG_INVALID', message: /A2A_AGENTS_FILE/ }, 'at boot')
})
