// docs/ai-sdk.md's shell blocks, run as written against a real server (only the port changes): the
// quick start's curl, and the resume-and-stop walkthrough. Its React and TypeScript blocks are what
// chat.test.ts does with the AI SDK's own Chat, transport and readers.
import t from 'tap'
import { listen } from '../helper.js'
import { until } from '../socket.js'
import { docBlocks, runShell } from '../docs/doc-blocks.js'

const ENV = { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' }

t.test('the quick start\'s curl streams the echo-stream agent\'s words as the UI message stream, [DONE] last', async (t) => {
  const { url } = await listen(t, ENV)
  const [curl] = docBlocks('docs/ai-sdk.md', '## Quick start')
  const out = await runShell((curl as string).replaceAll('http://127.0.0.1:3000', url))
  t.match(out, /^data: \{"type":"start","messageId":"[0-9a-f-]{36}","messageMetadata":\{"request_id":/)
  t.match(out, /"type":"reasoning-delta","id":"[^"]+","delta":"Processing request..."/)
  t.match(out, /"delta":"hello ".*"delta":"streaming ".*"delta":"world "/s)
  t.match(out, /"type":"finish","finishReason":"stop"/)
  t.ok(out.endsWith('data: [DONE]\n\n'))
})

t.test('the resume-and-stop walkthrough: the resumed stream starts at the start, ends cancelled, and the stop answers 202', async (t) => {
  const { app, url } = await listen(t, ENV)
  const [walkthrough] = docBlocks('docs/ai-sdk.md', '## Resume and stop')
  const out = await runShell((walkthrough as string).replaceAll('http://127.0.0.1:3000', url))
  t.match(out, /^data: \{"type":"start",/, 'the resumed stream, from its start')
  t.match(out, /"delta":"a ".*"delta":"slow "/s, 'with the words streamed before it')
  t.match(out, /\{"type":"abort","reason":"cancelled"\}/, 'stopped')
  t.match(out, /\{"request_id":"[0-9a-f-]{36}","cancelled":true\}/, 'the stop\'s answer')
  const requestId = /"cancelled":true/.test(out) ? /"request_id":"([0-9a-f-]{36})","cancelled"/.exec(out)?.[1] : undefined
  await until('the run is recorded', async () => (await app.ledger.get(requestId ?? ''))?.state === 'ended')
  t.match(await app.ledger.get(requestId ?? ''), { end_reason: 'cancelled' }, 'the run is recorded cancelled')
})
