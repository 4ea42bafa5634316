import t from 'tap'
import { randomUUID } from 'node:crypto'
import { Role, TaskState, type Message, type StreamResponse, type Task } from '@a2a-js/sdk'
import { AGENTS, FIXTURE_AGENTS_DIR, listen, SCRIPTED, streamingScript } from '../helper.js'
import { until } from '../socket.js'
import { a2aClient as client, BINDINGS, data, merge, message, text } from './client.js'

const send = (m: Message, returnImmediately = false) => ({ tenant: '', message: m, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately }, metadata: undefined })

/** The texts of an artifact's parts, joined. */
const textOf = (task: Task, artifactId: string): string => (task.artifacts.find((a) => a.artifactId === artifactId)?.parts ?? []).map((p) => p.content?.$case === 'text' ? p.content.value : '').join('')
const dataOf = (task: Task, artifactId: string): unknown => task.artifacts.find((a) => a.artifactId === artifactId)?.parts.find((p) => p.content?.$case === 'data')?.content?.value

for (const binding of BINDINGS) {
  t.test(`${binding}: SendMessage runs the agent and answers with its completed task; GetTask and ListTasks find it`, async (t) => {
    const { url } = await listen(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
    const a2a = await client(url, AGENTS.echo, binding)
    const result = await a2a.sendMessage(send(message([text('hello world')])))
    t.ok('status' in result, 'a task')
    const task = result as Task
    t.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED)
    t.same(dataOf(task, 'result'), { echo: 'hello world', calls: 1 }, 'the agent\'s result() is the artifact "result"')
    t.match(task.history, [{ role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: 'hello world' } }] }], 'the history holds the caller\'s message')

    const again = await a2a.sendMessage(send(message([text('again')], { contextId: task.contextId })))
    t.same(dataOf(again as Task, 'result'), { echo: 'again', calls: 2 }, 'the same contextId is the same session')

    const got = await a2a.getTask({ tenant: '', id: task.id, historyLength: undefined })
    t.same(got, task, 'GetTask answers the same task')
    const listed = await a2a.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 1, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: true })
    t.equal(listed.totalSize, 2)
    t.same(listed.tasks.map((x) => x.id), [(again as Task).id], 'newest first, one a page')
    const next = await a2a.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_COMPLETED, pageSize: 1, pageToken: listed.nextPageToken, historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })
    t.same(next.tasks.map((x) => x.id), [task.id], 'the next page')
    t.same(next.tasks[0]?.artifacts, [], 'without artifacts unless asked')
  })

  t.test(`${binding}: SendStreamingMessage streams the task: a task, appended artifact chunks for the deltas, the final status`, async (t) => {
    const { url } = await listen(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0' })
    const a2a = await client(url, AGENTS.echoStream, binding)
    const events: StreamResponse[] = []
    for await (const event of a2a.sendMessageStream(send(message([text('one two three')]), false))) events.push(event)
    t.equal(events[0]?.payload?.$case, 'task', 'the task first')
    const chunks = events.filter((e) => e.payload?.$case === 'artifactUpdate')
    t.ok(chunks.length >= 3, `${chunks.length} artifact chunks`)
    t.same(chunks.map((e) => e.payload?.$case === 'artifactUpdate' && e.payload.value.append).slice(0, 2), [false, true], 'the first chunk makes the artifact, the next append to it')
    const last = events.at(-1)?.payload
    t.equal(last?.$case === 'statusUpdate' && last.value.status?.state, TaskState.TASK_STATE_COMPLETED, 'the last event is the final status')
    const merged = merge(events)
    const stored = await a2a.getTask({ tenant: '', id: merged.id, historyLength: undefined })
    t.same(stored.artifacts, merged.artifacts, 'the merged stream is the task GetTask answers')
    t.match(textOf(stored, stored.artifacts[0]?.artifactId ?? ''), /one.*two.*three/s)
  })

  t.test(`${binding}: CancelTask cancels the run; a dropped stream resubscribes with no gap and no duplicate`, async (t) => {
    const { app, url } = await listen(t, { WORKERS_PER_TYPE: '0', MAX_EVENT_LOOP_DELAY_MS: '0', AGENTS_DIR: FIXTURE_AGENTS_DIR })
    const a2a = await client(url, SCRIPTED, binding)
    const dropped = new AbortController()
    const first: StreamResponse[] = []
    const script = [...streamingScript(40, 15), { op: 'close', name: 's' }]
    try {
      for await (const event of a2a.sendMessageStream(send(message([data({ script })])), { signal: dropped.signal })) {
        first.push(event)
        if (first.filter((e) => e.payload?.$case === 'artifactUpdate').length === 5) dropped.abort()
      }
    } catch (err) {
      if (!dropped.signal.aborted) throw err
    }
    const taskId = first[0]?.payload?.$case === 'task' ? first[0].payload.value.id : ''
    const rest: StreamResponse[] = []
    for await (const event of a2a.resubscribeTask({ tenant: '', id: taskId })) rest.push(event)
    t.equal(rest[0]?.payload?.$case, 'task', 'a re-subscription begins with the task as it stands')
    const merged = merge(rest)
    t.equal(merged.status?.state, TaskState.TASK_STATE_COMPLETED)
    const words = textOf(merged, merged.artifacts[0]?.artifactId ?? '').trim().split(' ')
    t.same(words, Array.from({ length: 40 }, (_, i) => `w${i}`), 'every delta once, in order')

    const long = await a2a.sendMessage(send(message([data({ script: [{ op: 'markdown', content: 'started' }, { op: 'wait_abort' }] })]), true))
    const id = (long as Task).id
    t.equal((long as Task).status?.state, TaskState.TASK_STATE_WORKING, 'returnImmediately: the task while it works')
    await until('the run to start', () => app.runs.size === 1)
    const cancelled = await a2a.cancelTask({ tenant: '', id, metadata: undefined })
    t.equal(cancelled.status?.state, TaskState.TASK_STATE_CANCELED)
    await t.rejects(a2a.cancelTask({ tenant: '', id: (await a2a.sendMessage(send(message([data({ script: [] })]))) as Task).id, metadata: undefined }), { name: /TaskNotCancelableError/ }, 'an ended task is not cancelable')
    await t.rejects(a2a.getTask({ tenant: '', id: randomUUID(), historyLength: undefined }), { name: /TaskNotFoundError/ })
  })
}
