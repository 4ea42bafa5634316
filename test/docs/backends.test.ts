import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { listen } from '../helper.js'
import { parseSse } from '../sse.js'
import { anthropic, fakeProvider, openai } from '../fixtures/providers.js'
import { docBlocks, runShell } from './doc-blocks.js'

// docs/backends.md's llm-chat example: the settings its start commands give, taken as bash reads them,
// with a local fake of the provider's API standing in for Ollama (OPENAI_BASE_URL) and for
// api.anthropic.com (ANTHROPIC_BASE_URL), and its chat commands pasted as written (only the port
// changes) against a server started with them. `npm start` itself is not run: it builds and listens on
// port 3000 (test/server-process.test.ts boots the built server).

/** The settings a `VAR=value ... npm start` block gives the server, as bash parses them. */
async function settings (t: Test, block: string): Promise<Record<string, string>> {
  const names = [...block.matchAll(/(?:^|\s)([A-Z][A-Z0-9_]*)=/g)].map((m) => m[1] as string)
  t.match(block, /npm start\n$/, 'the block starts the server')
  const values = (await runShell(block.replace(/npm start\n$/, `printenv ${names.join(' ')}\n`))).trimEnd().split('\n')
  return Object.fromEntries(names.map((name, i) => [name, values[i] as string]))
}

const [ollama, claude, chat] = docBlocks('docs/backends.md', '# Backends: LLMs and command-line agents')

t.test('pointed at an OpenAI-compatible server as the page says, llm-chat chats and /v1/backends counts the usage', async (t) => {
  const fake = await fakeProvider(t)
  const env = await settings(t, ollama as string)
  t.same(env, { OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1', OPENAI_MODEL: 'llama3.2' }, 'Ollama\'s address and a model')
  const { url } = await listen(t, { ...env, OPENAI_BASE_URL: `${fake.url}/v1` })
  fake.script({ frames: openai.text(['Hello, ', 'Bonjour, ', 'Hola.'], [14, 6]) })
  const [call, backends] = (chat as string).replaceAll('http://127.0.0.1:3000', url).split(/\n(?=curl -s http:\/\/[^ ]+\/v1\/backends)/)
  const packets = parseSse(await runShell(call as string)).packets
  t.same(packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['Hello, ', 'Bonjour, ', 'Hola.'], 'the answer streams')
  t.match(fake.received[0]?.body, { model: 'llama3.2', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello in three languages.' }] }, 'the page\'s model, system prompt and question went upstream')
  const listed = (JSON.parse(await runShell(backends as string)) as { backends: Array<Record<string, unknown>> }).backends
  t.match(listed.find((b) => b.name === 'openai'), { available: true, model: 'llama3.2', usage: { input: 14, output: 6 } }, 'available, its model and the usage so far')
})

t.test('the page\'s Anthropic settings (a fake standing in for api.anthropic.com) price the usage', async (t) => {
  const fake = await fakeProvider(t)
  const env = await settings(t, claude as string)
  t.match(env, { LLM_PROVIDER: 'anthropic', ANTHROPIC_API_KEY: 'sk-ant-...', ANTHROPIC_MODEL: 'claude-sonnet-5-5' })
  const { url } = await listen(t, { ...env, ANTHROPIC_BASE_URL: fake.url })
  fake.script({ frames: anthropic.text(['Hello.'], [1_000_000, 100_000]) })
  const [call] = (chat as string).replaceAll('http://127.0.0.1:3000', url).split(/\n(?=curl -s http:\/\/[^ ]+\/v1\/backends)/)
  const usage = parseSse(await runShell(call as string)).packets.find((p) => p.op === 'EVENT' && (p.p as { type: string }).type === 'USAGE')
  t.match(usage, { p: { data: { input_tokens: 1_000_000, output_tokens: 100_000, cost: 3 + 1.5 } } }, 'LLM_PRICES: $3 and $15 a million tokens')
})

t.test('with nothing configured, the chat command answers the 503 the page shows', async (t) => {
  const { url } = await listen(t)
  const [call] = (chat as string).replaceAll('http://127.0.0.1:3000', url).split(/\n(?=curl -s http:\/\/[^ ]+\/v1\/backends)/)
  const shown = /answers\n`(\{.*\})`\./.exec(readFileSync(new URL('../../docs/backends.md', import.meta.url), 'utf8'))?.[1] as string
  const body = JSON.parse(await runShell(call as string)) as Record<string, unknown>
  const expected = JSON.parse(shown.replace(',...,', ',')) as Record<string, unknown>
  t.same(body, { ...body, ...expected }, shown)
})
