import { Type, type Static } from 'typebox'
import { JsonObject } from './common.js'

const closed = { additionalProperties: false } as const
const TaskId = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' })

/** A task to create (`input` is accepted as an alias of `inputs`). */
export const NewTaskBody = Type.Object({
  id: Type.Optional(TaskId),
  type: Type.String({ minLength: 1, maxLength: 128 }),
  priority: Type.Optional(Type.Number()),
  max_attempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
  inputs: Type.Optional(JsonObject),
  input: Type.Optional(JsonObject),
  context: Type.Optional(JsonObject),
  /** `conversation_id` ties the task to a conversation's event feed. */
  metadata: Type.Optional(JsonObject),
  parent_id: Type.Optional(TaskId),
  dependency_ids: Type.Optional(Type.Array(TaskId, { maxItems: 1000 }))
}, { ...closed, title: 'NewTask' })

/**
 * `POST /v1/tasks`: one task, or `{ "tasks": [...] }` for a graph whose members depend on each other.
 * (One object rather than a union, because the validator drops unknown keys branch by branch.)
 */
export const CreateTasksBody = Type.Object({
  ...Type.Partial(NewTaskBody).properties,
  tasks: Type.Optional(Type.Array(NewTaskBody, { minItems: 1, maxItems: 10000 }))
}, { ...closed, title: 'CreateTasks' })

/**
 * Where a task is in its life. WAITING: its agent called an action marked `require_approval` and the
 * task waits for a person's answer (`POST /v1/tasks/{id}/approvals/{approval_id}`); no worker claims it
 * meanwhile, and its dependants wait as for any unfinished task.
 */
export const TaskStatus = Type.Union([Type.Literal('PENDING'), Type.Literal('IN_PROGRESS'), Type.Literal('WAITING'), Type.Literal('COMPLETED'), Type.Literal('FAILED'), Type.Literal('CANCELLED')], {
  description: 'PENDING (claimable once its dependencies are COMPLETED), IN_PROGRESS (claimed), WAITING (its agent asked a person for an approval: `metadata.approvals`), COMPLETED, FAILED, CANCELLED'
})
const Status = TaskStatus
const Time = Type.String({ format: 'date-time' })
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()])

/** A node of the task graph. */
export const Task = Type.Object({
  id: Type.String(),
  type: Type.String(),
  status: Status,
  owner: Nullable(Type.String()),
  priority: Type.Number(),
  /** Attempts so far; also the fencing token of the current claim. */
  attempt: Type.Integer(),
  max_attempts: Type.Integer(),
  inputs: JsonObject,
  outputs: Type.Union([JsonObject, Type.Null()]),
  context: JsonObject,
  /**
   * What the task was made with (`conversation_id`, `owner_key`, ...). A task whose agent asked a
   * person also holds `approvals` (TaskApproval[], in the order asked) and `host_calls` (its agent's
   * earlier host calls, replayed when it runs again).
   */
  metadata: Type.Unsafe<Record<string, unknown>>({ type: 'object', additionalProperties: true, description: 'What the task was made with (`conversation_id`, `owner_key`, `owner_agents`, `owner_scopes`, ...). A task whose agent called an action marked `require_approval` also holds `approvals` (`TaskApproval` objects, in the order asked; answer an open one with `POST /v1/tasks/{id}/approvals/{approval_id}`) and `host_calls` (its agent\'s earlier host calls, replayed when it runs again).' }),
  parent_id: Nullable(Type.String()),
  dependency_ids: Type.Array(Type.String()),
  created_at: Time,
  updated_at: Time,
  lease_expires_at: Nullable(Time),
  last_heartbeat_at: Nullable(Time),
  available_at: Time,
  error: Type.Union([JsonObject, Type.Null()]),
  /** In lists, for a PENDING task: how long it has been claimable and unclaimed, in ms. */
  waiting_ms: Type.Optional(Type.Integer({ minimum: 0 }))
}, { ...closed, title: 'Task' })
export type Task = Static<typeof Task>

/** Something about a request that was accepted anyway. */
export const TaskWarning = Type.Object({
  /** `unknown_task_type`: no agent of this type is loaded in this server (a worker process may still serve it). */
  code: Type.Literal('unknown_task_type'),
  type: Type.String(),
  message: Type.String()
}, { ...closed, title: 'TaskWarning' })

export const TaskList = Type.Object({
  tasks: Type.Array(Task),
  warnings: Type.Optional(Type.Array(TaskWarning))
}, { ...closed, title: 'TaskList' })

/** A person's answer to one of a task's approvals. */
export const TaskApprovalAnswer = Type.Object({
  approved: Type.Boolean({ description: 'true: the call is made; false: it answers `approval_rejected` with the comment as its reason, and the agent goes on' }),
  comment: Type.Optional(Type.String({ maxLength: 4000, description: 'Why (a rejection\'s reason, which the agent sees)' }))
}, { ...closed, title: 'TaskApprovalAnswer' })
export type TaskApprovalAnswer = Static<typeof TaskApprovalAnswer>

/** One question a task's agent asked (`metadata.approvals` of a task): may this call be made? */
export const TaskApproval = Type.Object({
  id: Type.String({ description: 'A UUID, the `approval_id` of its answer\'s route' }),
  message: Type.String(),
  call: Type.Object({}, { additionalProperties: true, description: 'What would be called: a tool call\'s `{ tool, action, args }`, an A2A call\'s `{ agent, capability, payload }`' }),
  asked_at: Time,
  answer: Type.Optional(Type.Object({
    approved: Type.Boolean(),
    comment: Type.Optional(Type.String()),
    by: Type.String({ description: 'The principal that answered' }),
    at: Time
  }, closed))
}, { ...closed, title: 'TaskApproval' })
