// The files `agent-host new agent` writes, one agent and one test per style. They are a new
// author's first contact with the project: test/scaffold.test.ts lints, typechecks and runs them.

/** The kinds of agent the scaffold makes. */
export type AgentStyle = 'json' | 'stream' | 'task' | 'contract'

/** What a template is filled with. */
export interface TemplateValues {
  /** The agent's name: its folder, its test file, its task type. */
  name: string
  /** The manifest id (a fresh UUID). */
  id: string
  author: string
  /** The manifest's `created_at` (ISO 8601). */
  createdAt: string
  /** `CONTRACT_VERSION` of the host that made it. */
  contractVersion: string
  /** From the agent's folder to `src/agents/index.js`. */
  authoring: string
  /** From the test's folder to `test/` (its helpers). */
  helpers: string
  /** From the test's folder to the agents folder, ending with `/`. */
  agentsFolder: string
}

const className = (name: string): string => name.split('-').map((part) => part.charAt(0).toUpperCase() + part.slice(1)).join('')

/** `text` as a single-quoted string literal. */
const literal = (text: string): string => `'${JSON.stringify(text).slice(1, -1).replaceAll('\\"', '"').replaceAll("'", "\\'")}'`

const metadata = (v: TemplateValues): string => `    metadata: {
      // clients call the agent by this id (context.agent_id): keep it when you rename the agent
      id: '${v.id}',
      name: '${v.name}',
      version: '0.1.0',
      author: ${literal(v.author)},
      created_at: '${v.createdAt}'
    },`

const json = (v: TemplateValues): string => `import { defineAgent } from '${v.authoring}'

/**
 * ${v.name}: greets someone by name, and welcomes back a name it has met in this session.
 * A JSON agent (request_response): it answers with one result. Replace the capability and
 * \`assist\` with your own; agents/README.md is the authors' contract.
 */
export default defineAgent({
  manifest: {
${metadata(v)}
    capabilities: [{
      name: 'greet',
      description: 'Greet someone by name',
      delivery_mode: 'request_response',
      // the host checks payload.payload against this before assist() runs (a 400 otherwise)
      inputs: {
        type: 'object',
        properties: { name: { type: 'string', minLength: 1, maxLength: 100 } },
        required: ['name'],
        additionalProperties: false
      },
      // and result() against this (a result that breaks it ends the run with agent_contract_violation)
      outputs: {
        type: 'object',
        properties: { greeting: { type: 'string' } },
        required: ['greeting'],
        additionalProperties: false
      }
    }]
  },
  async assist (request, session, response) {
    const name = String(request.payload.name)
    // session values are kept in SQLite per session_id, so they survive a restart
    const met = await session.get<string[]>('met', []) ?? []
    if (!met.includes(name)) await session.store('met', [...met, name])
    await response.result({ greeting: met.includes(name) ? \`Welcome back, \${name}!\` : \`Hello, \${name}!\` })
  }
})
`

const stream = (v: TemplateValues): string => `import { setTimeout as sleep } from 'node:timers/promises'
import { defineAgent } from '${v.authoring}'

/**
 * ${v.name}: streams the words of a text back in reverse order, one word at a time.
 * An SSE agent (server_sent_events): a thought, then a stream of deltas. A JSON client gets the
 * same run as a transcript. Replace the capability and \`assist\` with your own; agents/README.md
 * is the authors' contract.
 */
export default defineAgent({
  manifest: {
${metadata(v)}
    capabilities: [{
      name: 'reverse-words',
      description: 'Stream the words of a text in reverse order',
      delivery_mode: 'server_sent_events',
      // the host checks payload.payload against this before assist() runs (a 400 otherwise)
      inputs: {
        type: 'object',
        properties: {
          text: { type: 'string', minLength: 1, maxLength: 10000 },
          delay_ms: { type: 'integer', minimum: 0, maximum: 1000, default: 200 }
        },
        required: ['text'],
        additionalProperties: false
      }
    }]
  },
  async assist (request, _session, response) {
    const words = String(request.payload.text).split(/\\s+/).filter((word) => word !== '').reverse()
    const delay = Number(request.payload.delay_ms ?? 200)
    await response.thought(\`Reversing \${words.length} words\`)
    const stream = await response.create_stream('Reversed')
    for (const word of words) {
      // await every write: a slow reader then slows this loop instead of filling the server's memory
      await stream.write(word + ' ')
      // response.signal fires on cancel, shutdown or a fatal error: hand it to anything that waits
      if (delay > 0) await sleep(delay, undefined, { signal: response.signal })
    }
    await stream.close()
  }
})
`

const task = (v: TemplateValues): string => `import { AgentError, BaseAgent, type AgentResult, type TaskContext, type TaskNode } from '${v.authoring}'

/**
 * ${v.name}: a task agent. It works tasks of type "${v.name}" from the task graph
 * (\`POST /v1/tasks\`): the count, minimum, maximum and mean of \`inputs.numbers\`. Its result is
 * stored on the task; nothing reaches a user directly. Replace \`handleTask\` with your own work;
 * agents/README.md ("Task agents") is the contract.
 */
class ${className(v.name)} extends BaseAgent {
  // the task type this agent works
  readonly agentType = '${v.name}'

  async handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult> {
    const numbers = task.inputs.numbers
    // a task's inputs are not checked for you; bad ones fail the task at once (not retried)
    if (!Array.isArray(numbers) || numbers.length === 0 || !numbers.every((n): n is number => typeof n === 'number')) {
      throw new AgentError('inputs.numbers must be a non-empty array of numbers', { retryable: false })
    }
    // progress is an update on the task (GET /v1/tasks/:id/events), and a heartbeat
    await context.progress(\`read \${numbers.length} numbers\`, 0.5)
    const mean = numbers.reduce((sum, n) => sum + n, 0) / numbers.length
    return {
      task_id: task.id,
      outcome: 'completed',
      artifacts: [{ count: numbers.length, min: Math.min(...numbers), max: Math.max(...numbers), mean }],
      notes: \`the mean of \${numbers.length} numbers is \${mean}\`
    }
  }
}

export default new ${className(v.name)}()
`

const contract = (v: TemplateValues): string => `import { defineContractAgent } from '${v.authoring}'

/**
 * ${v.name}: a contract agent (seed 003). It takes an AgentInput and gives an AgentOutput: the
 * sentences, words and longest word of a text, as a report artifact and a \`${v.name}.analyzed\`
 * event on the bus. The host serves it behind \`POST /v1/assist\` and works tasks of type
 * "${v.name}" with it. Replace the capability and \`execute\` with your own; agents/README.md
 * ("Contract agents") is the contract.
 */
export default defineContractAgent({
${metadata(v).replace(/^ {2}/gm, '')}
  // the agent contract this was written against: the host refuses an incompatible one at boot
  contractVersion: '${v.contractVersion}',
  capabilities: [{
    name: 'analyze-text',
    description: 'Count the sentences and words of a text, and find its longest word',
    intent: 'analyze',
    // the call's signal fires past this (a caller may ask for less)
    timeout_ms: 10_000,
    // the host checks the payload against this before execute() runs
    inputs: {
      type: 'object',
      properties: { text: { type: 'string', maxLength: 100000 } },
      required: ['text'],
      additionalProperties: false
    }
  }],
  async execute (input, { log }) {
    const text = String(input.payload.text)
    const words = text.match(/[\\p{L}\\p{N}']+/gu) ?? []
    // 'fail' is a final answer (a task is not retried); 'retry' would ask for another attempt
    if (words.length === 0) return { task_id: input.task_id, status: 'fail', error: 'the text has no words' }
    const report = {
      sentences: text.split(/[.!?]+/).filter((s) => s.trim() !== '').length,
      words: words.length,
      longest: words.reduce((longest, word) => word.length > longest.length ? word : longest)
    }
    await log('info', \`analyzed \${words.length} words\`)
    return {
      task_id: input.task_id,
      status: 'ok',
      artifacts: [{ kind: 'report', ref: \`${v.name}/\${input.task_id}.json\`, content: report }],
      metrics: { words: report.words },
      // published to the event bus once the output has passed the contract (the key deduplicates it)
      events: [{ type: '${v.name}.analyzed', key: \`${v.name}:\${input.task_id}\`, data: report }]
    }
  },
  // your own check, after the contract's schema: false makes the output a contract violation
  validate: (output) => output.status !== 'ok' || output.artifacts?.length === 1
})
`

const testHead = (v: TemplateValues, imports: string[]): string => `import t from 'tap'
${imports.join('\n')}

// the app loads the agents of the folder ${v.name} lives in
const AGENTS_DIR = fileURLToPath(new URL('${v.agentsFolder}', import.meta.url))
`

const jsonTest = (v: TemplateValues): string => `${testHead(v, [
  "import { randomUUID } from 'node:crypto'",
  "import { fileURLToPath } from 'node:url'",
  `import { build, envelope } from '${v.helpers}helper.js'`,
  `import { checkErrorBody, checkServiceResponse } from '${v.helpers}sse.js'`
])}const AGENT_ID = '${v.id}'

t.test('${v.name} greets by name, and welcomes back a name it has met in the session', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const sessionId = randomUUID()
  const greet = async (name: string): Promise<unknown> => {
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENT_ID, { name }, { sessionId }) })
    t.equal(res.statusCode, 200, res.body)
    // checkServiceResponse fails the test unless the body is a valid CAP ServiceResponse
    return checkServiceResponse(res.json()).output
  }
  t.same(await greet('Ada'), { greeting: 'Hello, Ada!' })
  t.same(await greet('Ada'), { greeting: 'Welcome back, Ada!' })
  t.same(await greet('Grace'), { greeting: 'Hello, Grace!' })
})

t.test('${v.name} is not called without a name: the host checks the inputs first', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENT_ID, {}) })
  t.equal(res.statusCode, 400)
  t.match(checkErrorBody(res.json()), { code: 'AH_ERR_VALIDATION', message: /name/ })
})
`

const streamTest = (v: TemplateValues): string => `${testHead(v, [
  "import { fileURLToPath } from 'node:url'",
  `import { build, envelope } from '${v.helpers}helper.js'`,
  `import { checkServiceResponse, parseSse } from '${v.helpers}sse.js'`
])}const AGENT_ID = '${v.id}'

t.test('${v.name} streams the words of its text in reverse order', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'text/event-stream' }, payload: envelope(AGENT_ID, { text: 'one two three', delay_ms: 0 }) })
  t.equal(res.statusCode, 200, res.body)
  // parseSse fails the test on a frame or a stream that breaks CAP's rules
  const { packets } = parseSse(res.body)
  t.match(packets[0], { op: 'EVENT', p: { type: 'THOUGHT_TRACE', data: { thought: 'Reversing 3 words' } } })
  t.same(packets.filter((p) => p.op === 'DELTA').map((p) => p.p), ['three ', 'two ', 'one '])
})

t.test('${v.name} answers a JSON client with the transcript of the same run', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENT_ID, { text: 'one two three', delay_ms: 0 }) })
  t.equal(res.statusCode, 200, res.body)
  t.match(checkServiceResponse(res.json(), true).output, { streams: [{ title: 'Reversed', text: 'three two one ', state: 'closed' }] })
})
`

const settled = `
interface TaskView { status: string, attempt: number, outputs: { artifacts: unknown[] } | null, error: { reason: string, retryable: boolean } | null }

/** The task once a worker has finished with it (the app runs a worker per task agent). */
async function settled (app: FastifyInstance, id: string): Promise<TaskView> {
  for (const deadline = Date.now() + 10_000; ; await sleep(20)) {
    const task = (await app.inject({ url: \`/v1/tasks/\${id}\` })).json() as TaskView
    if (task.status === 'COMPLETED' || task.status === 'FAILED') return task
    if (Date.now() > deadline) throw new Error(\`task \${id} is still \${task.status}\`)
  }
}
`

const taskImports = (v: TemplateValues, sse: string): string[] => [
  "import { setTimeout as sleep } from 'node:timers/promises'",
  "import { fileURLToPath } from 'node:url'",
  "import type { FastifyInstance } from 'fastify'",
  `import { build${sse === '' ? '' : ', envelope'} } from '${v.helpers}helper.js'`,
  ...(sse === '' ? [] : [`import { ${sse} } from '${v.helpers}sse.js'`])
]

const taskTest = (v: TemplateValues): string => `${testHead(v, taskImports(v, ''))}// workers look for new tasks every TASK_POLL_MS (500 ms by default)
const SETTINGS = { AGENTS_DIR, TASK_POLL_MS: '20' }
${settled}
t.test('${v.name} works out the count, min, max and mean of a task\\'s numbers', async (t) => {
  const app = await build(t, SETTINGS)
  const created = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { id: 'numbers-1', type: '${v.name}', inputs: { numbers: [4, 1, 7] } } })
  t.equal(created.statusCode, 201, created.body)
  const task = await settled(app, 'numbers-1')
  t.equal(task.status, 'COMPLETED')
  t.same(task.outputs?.artifacts, [{ count: 3, min: 1, max: 7, mean: 4 }])
})

t.test('${v.name} fails a task whose numbers are not numbers, without retrying it', async (t) => {
  const app = await build(t, SETTINGS)
  await app.inject({ method: 'POST', url: '/v1/tasks', payload: { id: 'words-1', type: '${v.name}', inputs: { numbers: ['one', 'two'] } } })
  t.match(await settled(app, 'words-1'), { status: 'FAILED', attempt: 1, error: { reason: /non-empty array of numbers/, retryable: false } })
})
`

const contractTest = (v: TemplateValues): string => `${testHead(v, taskImports(v, 'checkServiceResponse'))}const AGENT_ID = '${v.id}'
const TEXT = 'Small agents are easy to test. Start here!'
const REPORT = { sentences: 2, words: 8, longest: 'agents' }
${settled}
t.test('${v.name} reports the sentences, words and longest word of a text', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENT_ID, { text: TEXT }) })
  t.equal(res.statusCode, 200, res.body)
  // the AgentOutput is the run's result, once it passed the contract
  t.match(checkServiceResponse(res.json()).output, {
    status: 'ok',
    artifacts: [{ kind: 'report', content: REPORT }],
    events: [{ type: '${v.name}.analyzed', data: REPORT }]
  })
})

t.test('${v.name} answers a text without words with status fail', async (t) => {
  const app = await build(t, { AGENTS_DIR })
  const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENT_ID, { text: '...' }) })
  t.match(checkServiceResponse(res.json()).output, { status: 'fail', error: 'the text has no words' })
})

t.test('${v.name} works the task graph too: a task of type "${v.name}" is a call of its capability', async (t) => {
  // workers look for new tasks every TASK_POLL_MS (500 ms by default)
  const app = await build(t, { AGENTS_DIR, TASK_POLL_MS: '20' })
  const created = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { id: 'text-1', type: '${v.name}', inputs: { text: TEXT } } })
  t.equal(created.statusCode, 201, created.body)
  t.match(await settled(app, 'text-1'), { status: 'COMPLETED', outputs: { artifacts: [{ kind: 'report', content: REPORT }] } })
})
`

/** The agent's `index.ts` for a style. */
export const AGENT_TEMPLATES: Record<AgentStyle, (v: TemplateValues) => string> = { json, stream, task, contract }

/** The agent's test for a style. */
export const TEST_TEMPLATES: Record<AgentStyle, (v: TemplateValues) => string> = { json: jsonTest, stream: streamTest, task: taskTest, contract: contractTest }
