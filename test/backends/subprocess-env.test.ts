import t from 'tap'
import { fileURLToPath } from 'node:url'
import { build, AGENTS } from '../helper.js'
import { parseSse } from '../sse.js'
import { loadConfig } from '../../src/config.js'
import { envelope } from '../helper.js'

const ENV_AGENT = fileURLToPath(new URL('../fixtures/cli/env-agent.mjs', import.meta.url))

// every secret setting the server may hold, with a value a leak would show
const SECRETS = {
  JWT_SECRET: 's'.repeat(40),
  AUDIT_KEY: 'a'.repeat(40),
  AUDIT_KEYS_RETIRED: 'r'.repeat(40),
  API_KEYS: JSON.stringify([{ name: 'x', key: 'ahk_secret_secret_secret_secret', scopes: ['admin'] }]),
  OPENAI_API_KEY: 'sk-openai-secret',
  ANTHROPIC_API_KEY: 'sk-ant-secret',
  SOME_OTHER_TOKEN: 'not-listed'
}

t.test('the CLI agent\'s process gets PATH, HOME, the locale and what CLI_AGENT_ENV lists, and no secret of the server', async (t) => {
  const app = await build(t, {
    ...SECRETS,
    PATH: process.env.PATH ?? '/usr/bin',
    HOME: '/home/agent',
    LANG: 'en_GB.UTF-8',
    EXTRA_VISIBLE: 'passed on purpose',
    EXTRA_HIDDEN: 'not listed',
    CLI_AGENT_ENV: 'EXTRA_VISIBLE',
    CLI_AGENT_COMMAND: JSON.stringify([process.execPath, ENV_AGENT]),
    WORKERS_PER_TYPE: '0'
  })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(AGENTS.cliAgent, { query: 'what do you see?' }) })
  const text = parseSse(res.body).packets.filter((p) => p.op === 'DELTA').map((p) => p.p as string).join('')
  // tap's coverage hook adds NODE_OPTIONS and _TAPJS_* to every process a test spawns: the harness's, not the server's
  const seen = Object.fromEntries(Object.entries(JSON.parse(text) as Record<string, string>).filter(([name]) => !name.startsWith('_TAPJS_') && name !== 'NODE_OPTIONS'))
  t.same(Object.keys(seen).sort(), ['AGENT_HOST_SESSION_ID', 'EXTRA_VISIBLE', 'HOME', 'LANG', 'PATH'])
  t.equal(seen.EXTRA_VISIBLE, 'passed on purpose')
  for (const [name, value] of Object.entries(SECRETS)) t.notOk(text.includes(value), `${name} does not reach the child`)
})

t.test('CLI_AGENT_ENV may not list a setting of the server', async (t) => {
  t.throws(() => loadConfig({ CLI_AGENT_ENV: 'PATH, JWT_SECRET' }), { code: 'AH_ERR_CONFIG_INVALID', message: /CLI_AGENT_ENV names settings of this server \(JWT_SECRET\)/ })
  t.throws(() => loadConfig({ CLI_AGENT_ENV: 'A;rm -rf' }), { code: 'AH_ERR_CONFIG_INVALID' })
})
