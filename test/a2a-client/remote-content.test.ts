import t from 'tap'
import { TaskState, type Part, type Task } from '@a2a-js/sdk'
import { refusal } from '../../src/a2a-client/call-answer.js'
import { artifactsResult, billingOf, contentOf, partValue, stateName, textOf, usageOf, withArtifact } from '../../src/a2a-client/remote-content.js'

// What the remote sent, as the calling agent gets it: parts, artifacts, states, billing.

const part = (content: Part['content'], mediaType = '', filename = ''): Part => ({ content, metadata: undefined, filename, mediaType })
const text = (value: string): Part => part({ $case: 'text', value })
const data = (value: unknown): Part => part({ $case: 'data', value })

t.test('a part as JSON: text, data, a file by URL or by bytes', async (t) => {
  t.equal(partValue(text('hi')), 'hi')
  t.same(partValue(data({ a: 1 })), { a: 1 })
  t.equal(partValue(data(undefined)), null)
  t.same(partValue(part({ $case: 'url', value: 'https://x/y.pdf' }, 'application/pdf', 'y.pdf')), { url: 'https://x/y.pdf', media_type: 'application/pdf', filename: 'y.pdf' })
  t.same(partValue(part({ $case: 'raw', value: Buffer.from('abc') }, 'text/plain')), { bytes: 'YWJj', media_type: 'text/plain', filename: '' })
  t.equal(partValue(part(undefined)), null, 'a part with no content')
})

t.test('parts as one value: text joined, a lone data part\'s value, else one value per part', async (t) => {
  t.equal(contentOf([text('a'), text('b')]), 'ab')
  t.same(contentOf([data([1, 2])]), [1, 2])
  t.same(contentOf([text('a'), data({ b: 1 })]), ['a', { b: 1 }])
  t.same(contentOf([]), [])
  t.equal(textOf(undefined), undefined)
  t.equal(textOf({ parts: [data(1)] } as unknown as Parameters<typeof textOf>[0]), undefined, 'no text part')
})

t.test('states by the names agents are told', async (t) => {
  t.equal(stateName(TaskState.TASK_STATE_INPUT_REQUIRED), 'input_required')
  t.equal(stateName(TaskState.TASK_STATE_AUTH_REQUIRED), 'auth_required')
  t.equal(stateName(TaskState.TASK_STATE_SUBMITTED), 'submitted')
  t.equal(stateName(TaskState.UNRECOGNIZED), 'unknown')
  t.equal(stateName(undefined), 'unknown')
})

t.test('artifacts: the only one\'s content, else a list; chunks appended to the artifact of their id', async (t) => {
  const artifact = (artifactId: string, parts: Part[]): Task['artifacts'][number] => ({ artifactId, name: '', description: '', parts, metadata: undefined, extensions: [] })
  t.equal(artifactsResult([]), undefined)
  let task: Task = { id: 't', contextId: 'c', status: undefined, artifacts: [], history: [], metadata: undefined }
  task = withArtifact(task, artifact('x', [text('a')]), false)
  task = withArtifact(task, artifact('x', [text('b')]), true)
  task = withArtifact(task, artifact('y', [data(1)]), false)
  t.same(artifactsResult(task.artifacts), ['ab', 1])
  task = withArtifact(task, artifact('y', [data(2)]), false)
  t.same(artifactsResult(task.artifacts), ['ab', 2], 'not appended: replaced')
})

t.test('billing: the seed\'s billing object (numbers only), else cost and usage; the tokens and cost counted of it', async (t) => {
  t.equal(billingOf(undefined), undefined)
  t.equal(billingOf({ other: 1 }), undefined)
  t.same(billingOf({ billing: { cost_usd: 0.5, tier: 'gold', calls: 2 } }), { cost_usd: 0.5, calls: 2 })
  t.same(billingOf({ cost: 0.1, usage: { input_tokens: 10, output_tokens: 5 } }), { cost_usd: 0.1, input_tokens: 10, output_tokens: 5 })
  t.same(billingOf({ cost_usd: 0.2, cost: 9 }), { cost_usd: 0.2 }, 'cost_usd first')
  t.same(billingOf({ usage: 'lots' }), undefined)
  t.equal(usageOf(undefined), undefined)
  t.equal(usageOf({ calls: 2 }), undefined, 'nothing it can count')
  t.same(usageOf({ input_tokens: 10, output_tokens: 2.5 }), { input: 10, output: 0 }, 'tokens are whole')
  t.same(usageOf({ cost: 0.3 }), { input: 0, output: 0, cost: 0.3 })
  t.equal(usageOf({ cost_usd: -1 }), undefined, 'no negative cost')
})

t.test('what the remote may make large is bounded: the error kept, the billing entries taken', async (t) => {
  const answer = refusal({ agent: 'a', callId: 'c', capability: 'x', durationMs: 1.4 }, 'e'.repeat(5000))
  t.equal(String(answer.metadata.error).length, 2001)
  t.equal(answer.metadata.duration_ms, 1)
  const billing = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, i]))
  t.equal(Object.keys(billingOf({ billing }) ?? {}).length, 64)
})
