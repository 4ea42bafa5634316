import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { AH_ERR_FORBIDDEN, AH_ERR_INTERRUPT_CLOSED, AH_ERR_TASK_APPROVAL_NOT_FOUND, AH_ERR_TASK_INVALID, AH_ERR_TASK_NOT_FOUND, AH_ERR_TASK_STATE, AH_ERR_VALIDATION, withDetails } from '../../errors.js'
import type { StoredEvent } from '../../protocol/events.js'
import { documented, errorResponse, validationError } from '../../protocol/openapi.js'
import { EventPage } from '../../protocol/records.js'
import { CreateTasksBody, Task, TaskApprovalAnswer, TaskList, TaskStatus } from '../../protocol/tasks.js'
import type { FastifyRequest } from 'fastify'
import { approvalsOf, ownedBy, ownerOf, type NewTask, type TaskNode } from '../../storage/tasks/task.js'
import { cutText } from '../../storage/audit-text.js'
import { viewerOf } from '../../auth/scopes.js'
import { sees, type Viewer } from '../../storage/tenants.js'

function invalid (path: string, message: string): Error {
  return withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} ${message}`), { errors: [{ path, message }] })
}

const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) })
const ApprovalParams = Type.Object({ id: Params.properties.id, approval_id: Type.String({ minLength: 1, maxLength: 128 }) })
const EXAMPLE_TASK = 'c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f'
const EXAMPLE_APPROVAL = '0f1e2d3c-4b5a-4697-8877-665544332211'
const taskNotFound = errorResponse('No task has this id', new AH_ERR_TASK_NOT_FOUND(EXAMPLE_TASK))
const badQuery = errorResponse('A query parameter is malformed', validationError('/querystring/limit', 'must be <= 1000'))

/** A page of events, with the cursor of the next one when it is full. */
function page (events: StoredEvent[], limit: number): { events: StoredEvent[], next?: number } {
  const last = events.at(-1)
  return events.length === limit && last !== undefined ? { events, next: last.seq } : { events }
}
const Page = {
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
  offset: Type.Integer({ minimum: 0, default: 0 })
}

/**
 * The task graph over HTTP: create tasks (one or a graph), list and read them, cancel one (its
 * running handler is aborted), answer a waiting one's approval, and read events: a task's, or a conversation's (only what the
 * narrator made user-visible unless `internal=true`).
 */
const taskRoutes: FastifyPluginAsyncTypebox = async (app) => {
  /** The task, if the caller may see it (`auth/scopes.ts:viewerOf`); another's is not found. */
  const visibleTask = async (id: string, identity: FastifyRequest['identity']): Promise<TaskNode> => {
    const task = await app.tasks.get(id)
    if (task === undefined || !sees(viewerOf(identity), ownerOf(task))) throw new AH_ERR_TASK_NOT_FOUND(id)
    return task
  }

  /** Refuse a batch that names (as dependency or parent) a task the caller may not see, as if it did not exist. */
  const refuseOthers = async (batch: NewTask[], viewer: Viewer): Promise<void> => {
    if ('all' in viewer) return
    const inBatch = new Set(batch.map((t) => t.id).filter((id): id is string => id !== undefined))
    for (const task of batch) {
      for (const id of [...(task.dependency_ids ?? []), ...(task.parent_id != null ? [task.parent_id] : [])]) {
        if (inBatch.has(id)) continue
        const named = await app.tasks.get(id)
        if (named === undefined || !sees(viewer, ownerOf(named))) throw new AH_ERR_TASK_INVALID(`task ${task.id ?? '(new)'} depends on unknown task "${id}"`)
      }
    }
  }

  app.post('/v1/tasks', {
    schema: {
      operationId: 'createTasks',
      tags: ['tasks'],
      summary: 'Create a task, or a graph of tasks ({ tasks: [...] }) with dependencies; warnings name types no agent here serves',
      description: 'Send one task, or `{ "tasks": [...] }` whose members name each other in `dependency_ids` (give them `id`s), not both. The example asks the bundled `wordcount` task agent.',
      body: documented(CreateTasksBody, { examples: [{ type: 'wordcount', inputs: { text: 'the quick brown fox jumps over the lazy dog' }, metadata: { conversation_id: 'swagger-ui' } }] }),
      response: {
        201: documented(TaskList, { description: 'Created, PENDING until a worker of their type claims them' }),
        400: errorResponse('The body is malformed (`AH_ERR_VALIDATION`) or the graph is not valid: an id used twice, an unknown dependency, a cycle (`AH_ERR_TASK_INVALID`)',
          validationError('/type', 'is required'), new AH_ERR_TASK_INVALID('dependency cycle: a -> b -> a')),
        403: errorResponse('The caller\'s key (or token) may not invoke the agent of a task\'s type: nothing is created (`AH_ERR_FORBIDDEN`)', new AH_ERR_FORBIDDEN('this key may not invoke agent "refactor"'))
      }
    }
  }, async (request, reply) => {
    const { tasks: many, ...one } = request.body
    if (many !== undefined && Object.keys(one).length > 0) throw invalid('/', 'send either one task or { tasks: [...] }, not both')
    if (many === undefined && one.type === undefined) throw invalid('/type', 'is required')
    // a task is its creator's, whatever the body says, held to its creator's agent list; it may name only its creator's tasks
    const batch = ((many ?? [one]) as NewTask[]).map((task) => ({ ...task, metadata: ownedBy(request.identity, task.metadata) }))
    await refuseOthers(batch, viewerOf(request.identity))
    const tasks = await app.tasks.create(batch)
    request.log.info({ tasks: tasks.map((t) => t.id) }, 'tasks created')
    await app.audit.append({ actor: request.identity.id, action: 'task.create', resource: tasks.map((t) => t.id).join(',').slice(0, 1024), success: true, trace_id: request.traceId, details: { count: tasks.length, types: [...new Set(tasks.map((t) => t.type))] } })
    const served = new Set(app.taskAgents.map((loaded) => loaded.agent.agentType))
    const unknown = [...new Set(tasks.map((t) => t.type))].filter((type) => !served.has(type))
    const warnings = unknown.map((type) => ({
      code: 'unknown_task_type' as const,
      type,
      message: `No agent of type "${type}" is loaded in this server: the task waits until a worker of that type (agent-host worker --type ${type}) claims it`
    }))
    return await reply.code(201).send(warnings.length > 0 ? { tasks, warnings } : { tasks })
  })

  app.get('/v1/tasks', {
    schema: {
      operationId: 'listTasks',
      tags: ['tasks'],
      summary: 'Tasks, oldest first (a PENDING one says how long it has waited: waiting_ms)',
      querystring: Type.Object({
        status: Type.Optional(TaskStatus),
        type: Type.Optional(Type.String()),
        conversation_id: Type.Optional(Type.String()),
        ...Page
      }),
      response: { 200: TaskList, 400: badQuery }
    }
  }, async (request) => {
    const now = Date.now()
    return {
      tasks: (await app.tasks.list({ ...request.query, viewer: viewerOf(request.identity) })).map((task) => task.status === 'PENDING'
        ? { ...task, waiting_ms: Math.max(0, now - Date.parse(task.available_at)) }
        : task)
    }
  })

  app.get('/v1/tasks/:id', {
    schema: { operationId: 'getTask', tags: ['tasks'], summary: 'One task', params: Params, response: { 200: Task, 404: taskNotFound } }
  }, async (request) => await visibleTask(request.params.id, request.identity))

  app.post('/v1/tasks/:id/cancel', {
    schema: {
      operationId: 'cancelTask',
      tags: ['tasks'],
      summary: 'Cancel a pending, running or waiting task (a running handler gets its AbortSignal)',
      params: Params,
      response: {
        200: Task,
        404: taskNotFound,
        409: errorResponse('The task has ended already (COMPLETED, FAILED or CANCELLED)', new AH_ERR_TASK_STATE(EXAMPLE_TASK, 'COMPLETED', 'cancel'))
      }
    }
  }, async (request) => {
    await visibleTask(request.params.id, request.identity)
    const task = await app.tasks.cancel(request.params.id)
    const aborted = app.workers.cancel(task.id)
    await app.audit.append({ actor: request.identity.id, action: 'task.cancel', resource: task.id, success: true, details: { aborted_handler: aborted } })
    return task
  })

  app.post('/v1/tasks/:id/approvals/:approval_id', {
    schema: {
      operationId: 'answerTaskApproval',
      tags: ['tasks'],
      summary: 'Approve or reject a call a WAITING task\'s agent asked to make (an action marked require_approval)',
      description: 'A task agent\'s `host.tools.call` or `host.a2a.call` of an action an operator marked `require_approval` (MCP_SERVERS_FILE, A2A_AGENTS_FILE) stops the task: WAITING, with the question in `metadata.approvals` (`GET /v1/tasks/{id}`: its `id`, `message` and `call`). The answer is audited (`interrupt.approve` or `interrupt.reject`); once no question is open the task is PENDING again and its agent runs from the start, its earlier host calls replayed, the approved call made (or answered `approval_rejected` with the comment as its reason).',
      params: ApprovalParams,
      body: documented(TaskApprovalAnswer, { examples: [{ approved: true }, { approved: false, comment: 'not on the main branch' }] }),
      response: {
        202: documented(Task, { description: 'Answered: the task, PENDING again once none of its approvals is open (WAITING while one is)' }),
        400: errorResponse('The body is not `{ approved: boolean, comment?: string }` (`AH_ERR_VALIDATION`)', validationError('/approved', 'is required')),
        404: errorResponse('No task has this id, or the caller may not see it (`AH_ERR_TASK_NOT_FOUND`); or the task asked no approval with this id (`AH_ERR_TASK_APPROVAL_NOT_FOUND`)',
          new AH_ERR_TASK_NOT_FOUND(EXAMPLE_TASK), new AH_ERR_TASK_APPROVAL_NOT_FOUND(EXAMPLE_TASK, EXAMPLE_APPROVAL)),
        409: errorResponse('The approval was answered already, or its task no longer waits (cancelled) (`AH_ERR_INTERRUPT_CLOSED`)', new AH_ERR_INTERRUPT_CLOSED(EXAMPLE_APPROVAL, 'it was answered already'))
      }
    }
  }, async (request, reply) => {
    const { id, approval_id: approvalId } = request.params
    await visibleTask(id, request.identity)
    const { approved, comment } = request.body
    const task = await app.tasks.answer(id, approvalId, { approved, ...(comment !== undefined ? { comment } : {}), by: request.identity.id })
    const approval = approvalsOf(task).find((a) => a.id === approvalId)
    request.log.info({ taskId: id, approvalId, approved, status: task.status }, 'task approval answered')
    // as a run's answer is audited (assist/engine.ts:#takeAnswers), the task as its resource
    await app.audit.append({
      actor: request.identity.id,
      action: approved ? 'interrupt.approve' : 'interrupt.reject',
      resource: `task:${id}`,
      success: true,
      trace_id: request.traceId,
      details: { task: id, interrupt_id: approvalId, kind: 'approval', message: cutText(approval?.message ?? '', 256), call: approval?.call ?? {}, answer: { approved, ...(comment !== undefined ? { comment } : {}) }, status: task.status }
    })
    return await reply.code(202).send(task)
  })

  app.get('/v1/tasks/:id/events', {
    schema: {
      operationId: 'listTaskEvents',
      tags: ['tasks'],
      summary: 'The events of one task (internal: AGENT_UPDATE, AGENT_RESULT, task.waiting, task.stalled), oldest first; page on with `after` (the previous page\'s `next`)',
      params: Params,
      querystring: Type.Object({ after: Type.Optional(Type.Integer({ minimum: 0 })), ...Page }),
      response: { 200: EventPage, 404: taskNotFound }
    }
  }, async (request) => {
    await visibleTask(request.params.id, request.identity)
    const { after, limit, offset } = request.query
    return page((await app.events.list({ task_id: request.params.id, kind: 'task', after: after ?? 0, limit: limit + offset })).slice(offset), limit)
  })

  app.get('/v1/conversations/:id/events', {
    schema: {
      operationId: 'listConversationEvents',
      tags: ['tasks'],
      summary: 'A conversation\'s feed: user-visible (narrator) events, or every event with internal=true; page on with `after` (the previous page\'s `next`)',
      description: '`internal=true` needs the scope `events:internal` as well.',
      params: Params,
      querystring: Type.Object({ internal: Type.Boolean({ default: false }), after: Type.Optional(Type.Integer({ minimum: 0 })), limit: Page.limit }),
      response: { 200: EventPage, 400: badQuery }
    }
  }, async (request) => {
    const { internal, after, limit } = request.query
    return page(await app.events.list({ session_id: request.params.id, ...(internal ? {} : { visibility: 'user' as const }), viewer: viewerOf(request.identity), after: after ?? 0, limit }), limit)
  })
}

export default taskRoutes
