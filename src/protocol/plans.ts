import { Type, type Static } from 'typebox'
import { Task, TaskStatus } from './tasks.js'

/** `POST /v1/plans` answer: the tasks made from the plan, and its critical path. */
export const PlanCreated = Type.Object({
  plan_id: Type.String(),
  tasks: Type.Array(Task),
  /** The plan's task ids on the longest chain of dependencies by `estimated_hours`. */
  critical_path: Type.Array(Type.String()),
  /** The critical path's hours: the plan's duration with enough workers. */
  estimated_duration_hours: Type.Number({ minimum: 0 })
}, { additionalProperties: false, title: 'PlanCreated' })
export type PlanCreated = Static<typeof PlanCreated>

/** `GET /v1/plans/:id`: how far a plan has come. */
export const PlanProgress = Type.Object({
  plan_id: Type.String(),
  total: Type.Integer({ minimum: 0 }),
  tasks_by_status: Type.Record(TaskStatus, Type.Integer({ minimum: 0 })),
  critical_path: Type.Array(Type.String()),
  critical_path_done: Type.Array(Type.String()),
  critical_path_remaining: Type.Array(Type.String()),
  estimated_duration_hours: Type.Number({ minimum: 0 }),
  /** Hours of the critical path's tasks not completed yet. */
  remaining_hours: Type.Number({ minimum: 0 }),
  /** What the completed tasks produced. */
  artifacts: Type.Array(Type.Object({ task_id: Type.String(), artifact: Type.Unknown() }, { additionalProperties: false })),
  tasks: Type.Array(Task)
}, { additionalProperties: false, title: 'PlanProgress' })
export type PlanProgress = Static<typeof PlanProgress>
