// Human in the loop over AG-UI, with HttpAgent against a real server: a run that stops to ask
// finishes with AG-UI's interrupt outcome, and the thread's next run answers it through the
// protocol (RunAgentInput.resume), or gives it up; only the run's caller may answer.
import t from 'tap'
import type { HttpAgent } from '@ag-ui/client'
import type { Interrupt, RunFinishedEvent } from '@ag-ui/core'
import { resumeIntent } from '../../src/ag-ui/interrupts.js'
import { AGENTS, listen } from '../helper.js'
import { agUiAgent, ALICE, BOB, KEYS, rawEvents, runInput } from './client.js'

const ENV = { WORKERS_PER_TYPE: '0' }

/** Run `agent` as runAgent does: its result and the RUN_FINISHED it ended with. */
async function run (agent: HttpAgent, parameters: Parameters<HttpAgent['runAgent']>[0] = {}): Promise<{ result: unknown, finished: RunFinishedEvent | undefined }> {
  let finished: RunFinishedEvent | undefined
  const { result } = await agent.runAgent(parameters, { onRunFinishedEvent: ({ event }) => { finished = event } })
  return { result, finished }
}

/** Why running `agent` failed (HttpAgent's error for an answer that is not 200), kept from the console. */
async function refused (agent: HttpAgent, parameters: Parameters<HttpAgent['runAgent']>[0]): Promise<{ status?: number, payload?: { code: string } }> {
  let failed: unknown
  // stopPropagation: the failure is the subscriber's to handle (HttpAgent then neither logs nor rethrows it)
  await agent.runAgent(parameters, { onRunFailed: ({ error }) => { failed = error; return { stopPropagation: true } as Record<string, unknown> } })
  if (failed === undefined) throw new Error('the run was not refused')
  return failed as { status?: number, payload?: { code: string } }
}

t.test('a question is AG-UI\'s interrupt outcome; the next run\'s resume answers it and the run goes on to its result', async (t) => {
  const { url } = await listen(t, ENV)
  const agent = agUiAgent(url, AGENTS.ask)
  const asked = await run(agent, { forwardedProps: { question: 'Which colour?' } })
  t.match(asked.finished?.outcome, { type: 'interrupt', interrupts: [{ reason: 'input', message: 'Which colour?', responseSchema: { required: ['answer'] }, expiresAt: String }] })
  const [question] = agent.pendingInterrupts
  t.ok(question, 'HttpAgent holds the interrupt as pending')
  t.equal(asked.result, undefined, 'no result yet')

  const answered = await run(agent, { resume: [{ interruptId: (question as Interrupt).id, status: 'resolved', payload: { answer: 'blue' } }] })
  t.match(answered.finished?.outcome, { type: 'success' })
  t.same(answered.result, { question: 'Which colour?', answer: 'blue' }, 'the agent\'s RESULT is the run\'s result')
  t.same(agent.pendingInterrupts, [], 'nothing pending any more')
})

t.test('the ask agent takes a chat\'s user message as its question', async (t) => {
  const { url } = await listen(t, ENV)
  const agent = agUiAgent(url, AGENTS.ask)
  agent.addMessage({ id: 'm1', role: 'user', content: 'Which colour?' })
  const asked = await run(agent, {})
  t.match(asked.finished?.outcome, { type: 'interrupt', interrupts: [{ reason: 'input', message: 'Which colour?' }] })
})

t.test('an approval: its responseSchema is CAP\'s approval; a wrong answer is a plain 400 and the question still waits', async (t) => {
  const { url } = await listen(t, ENV)
  const agent = agUiAgent(url, AGENTS.ask)
  const asked = await run(agent, { forwardedProps: { question: 'Ship it?', approve: true } })
  t.match(asked.finished?.outcome, { type: 'interrupt', interrupts: [{ reason: 'approval', responseSchema: { required: ['approved'], properties: { approved: { type: 'boolean' } } } }] })
  const id = (agent.pendingInterrupts[0] as Interrupt).id
  t.match(await refused(agent, { resume: [{ interruptId: id, status: 'resolved', payload: { approved: 'sure' } }] }), { status: 400, payload: { code: 'AH_ERR_INTERRUPT_ANSWER_INVALID' } })
  const answered = await run(agent, { resume: [{ interruptId: id, status: 'resolved', payload: { approved: false, comment: 'not on a Friday' } }] })
  t.same(answered.result, { question: 'Ship it?', approved: false, comment: 'not on a Friday' })
})

t.test('a stranger cannot answer another caller\'s interrupt, on the same thread or with its id', async (t) => {
  const { url } = await listen(t, { ...ENV, AUTH_MODE: 'apikey', API_KEYS: KEYS })
  const alice = agUiAgent(url, AGENTS.ask, { key: ALICE })
  await run(alice, { forwardedProps: { question: 'Your PIN?' } })
  const id = (alice.pendingInterrupts[0] as Interrupt).id
  const bob = agUiAgent(url, AGENTS.ask, { key: BOB, threadId: alice.threadId })
  t.match(await refused(bob, { resume: [{ interruptId: id, status: 'resolved', payload: { answer: '1234' } }] }), { status: 404, payload: { code: 'AH_ERR_INTERRUPT_NOT_FOUND' } }, 'on the same thread')
  const elsewhere = agUiAgent(url, AGENTS.ask, { key: BOB })
  t.match(await refused(elsewhere, { resume: [{ interruptId: id, status: 'resolved', payload: { answer: '1234' } }] }), { status: 404, payload: { code: 'AH_ERR_INTERRUPT_NOT_FOUND' } }, 'on a thread of his own')
  t.match(await refused(bob, { resume: [{ interruptId: id, status: 'cancelled' }], forwardedProps: { question: 'Mine?' } }), { status: 404, payload: { code: 'AH_ERR_INTERRUPT_NOT_FOUND' } }, 'nor give it up')
  const answered = await run(alice, { resume: [{ interruptId: id, status: 'resolved', payload: { answer: '0000' } }] })
  t.same(answered.result, { question: 'Your PIN?', answer: '0000' }, 'its caller still may')
})

t.test('resume entries "cancelled" give the questions up (the waiting run ends) and the run is an ordinary new one', async (t) => {
  const { url } = await listen(t, ENV)
  const agent = agUiAgent(url, AGENTS.ask)
  await run(agent, { runId: 'asks', forwardedProps: { question: 'First?' } })
  const first = agent.pendingInterrupts[0] as Interrupt
  const next = await run(agent, { resume: [{ interruptId: first.id, status: 'cancelled' }], forwardedProps: { question: 'Second?' } })
  t.match(next.finished?.outcome, { type: 'interrupt', interrupts: [{ message: 'Second?' }] }, 'the new run asks its own question')
  const late = agUiAgent(url, AGENTS.ask, { threadId: agent.threadId })
  t.match(await refused(late, { resume: [{ interruptId: first.id, status: 'resolved', payload: { answer: 'late' } }] }), { status: 409, payload: { code: 'AH_ERR_INTERRUPT_CLOSED' } }, 'the question given up takes no answer any more')
  // the same give-up sent again: its questions are given up already
  const again = agUiAgent(url, AGENTS.ask, { threadId: agent.threadId })
  const events = await rawEvents(again, runInput(again, { resume: [{ interruptId: first.id, status: 'cancelled' }], forwardedProps: { question: 'Third?' } }))
  t.match(events.at(-1), { type: 'RUN_FINISHED', outcome: { type: 'interrupt', interrupts: [{ message: 'Third?' }] } })
})

t.test('a resume that both answers and gives up is refused before any run', async (t) => {
  t.throws(() => resumeIntent([{ interruptId: 'a', status: 'resolved', payload: 1 }, { interruptId: 'b', status: 'cancelled' }]), { code: 'AH_ERR_VALIDATION', message: /both answers and cancels/ })
  t.same(resumeIntent([{ interruptId: 'a', status: 'cancelled' }]), { cancelled: ['a'] })
  t.same(resumeIntent([{ interruptId: 'a', status: 'resolved', payload: { x: 1 } }]), { answers: [{ interrupt_id: 'a', value: { x: 1 } }] })
})
