import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { AH_ERR_FORBIDDEN, AH_ERR_PLAN_NOT_FOUND, AH_ERR_TASK_INVALID } from '../../errors.js'
import { ExecutionPlan } from '../../protocol/contract.js'
import { errorResponse } from '../../protocol/openapi.js'
import { PlanCreated, PlanProgress } from '../../protocol/plans.js'
import { ownedBy, TASK_STATUSES, type TaskNode } from '../../storage/tasks/task.js'
import { criticalPath, planTasks } from '../../storage/tasks/plans.js'
import { viewerOf } from '../../auth/scopes.js'

/** The critical path of a plan's stored tasks, by their plan task ids. */
function pathOf (tasks: TaskNode[]): { path: string[], hours: number } {
  const planId = (task: TaskNode): string => String(task.metadata.plan_task_id)
  const byGraphId = new Map(tasks.map((t) => [t.id, planId(t)]))
  return criticalPath(tasks.map((t) => ({ id: planId(t), hours: Number(t.metadata.estimated_hours ?? 0), dependencies: t.dependency_ids.map((d) => byGraphId.get(d) ?? d) })))
}

/**
 * Plans (seed 003's ExecutionPlan) as task graphs: `POST /v1/plans` checks the plan (agents that run
 * here, dependencies that exist, no cycle), creates its tasks in one step and answers the critical
 * path; `GET /v1/plans/:id` says how far it has come.
 */
const planRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/v1/plans', {
    schema: {
      operationId: 'createPlan',
      tags: ['tasks'],
      summary: 'Turn an ExecutionPlan into tasks of the graph, in one step, and get its critical path',
      description: 'Each plan task becomes the task `<plan id>.<task id>` for the task agents of its `assigned_agent`, with its priority, `retry_policy.max_attempts`, its dependencies, and the plan task as `inputs.task`. Unknown agents, unknown dependencies, repeated ids and cycles are a 400 naming them, an agent the caller\'s key (or token) may not invoke a 403, and nothing is created.',
      body: ExecutionPlan,
      response: {
        201: PlanCreated,
        400: errorResponse('The plan names an agent not running here, a task it lacks, an id twice, or has a cycle (`AH_ERR_TASK_INVALID`)', new AH_ERR_TASK_INVALID('dependency cycle: a -> b -> a')),
        403: errorResponse('The caller\'s key (or token) may not invoke an agent the plan assigns a task to: nothing is created (`AH_ERR_FORBIDDEN`)', new AH_ERR_FORBIDDEN('this key may not invoke agent "refactor"'))
      }
    }
  }, async (request, reply) => {
    const plan = request.body
    const batch = planTasks(plan, new Set(app.taskAgents.map((loaded) => loaded.agent.agentType)))
      .map((task) => ({ ...task, metadata: ownedBy(request.identity, task.metadata) }))
    const tasks = await app.tasks.create(batch)
    const path = pathOf(tasks)
    request.log.info({ plan: plan.id, tasks: tasks.length, critical_path: path.path }, 'plan created')
    await app.audit.append({ actor: request.identity.id, action: 'plan.create', resource: plan.id, success: true, trace_id: request.traceId, details: { tasks: tasks.length } })
    return await reply.code(201).send({ plan_id: plan.id, tasks, critical_path: path.path, estimated_duration_hours: path.hours })
  })

  app.get('/v1/plans/:id', {
    schema: {
      operationId: 'getPlan',
      tags: ['tasks'],
      summary: 'How far a plan has come: tasks by status, the critical path done and remaining, artifacts',
      params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) }),
      response: { 200: PlanProgress, 404: errorResponse('No plan with this id', new AH_ERR_PLAN_NOT_FOUND('plan-1')) }
    }
  }, async (request) => {
    const tasks = (await app.tasks.list({ limit: 1_000_000, viewer: viewerOf(request.identity) })).filter((t) => t.metadata.plan_id === request.params.id)
    if (tasks.length === 0) throw new AH_ERR_PLAN_NOT_FOUND(request.params.id)
    const path = pathOf(tasks)
    const status = new Map(tasks.map((t) => [String(t.metadata.plan_task_id), t]))
    const done = path.path.filter((id) => status.get(id)?.status === 'COMPLETED')
    const remaining = path.path.filter((id) => status.get(id)?.status !== 'COMPLETED')
    return {
      plan_id: request.params.id,
      total: tasks.length,
      tasks_by_status: Object.fromEntries(TASK_STATUSES.map((s) => [s, tasks.filter((t) => t.status === s).length])) as Record<TaskNode['status'], number>,
      critical_path: path.path,
      critical_path_done: done,
      critical_path_remaining: remaining,
      estimated_duration_hours: path.hours,
      remaining_hours: remaining.reduce((sum, id) => sum + Number(status.get(id)?.metadata.estimated_hours ?? 0), 0),
      artifacts: tasks.filter((t) => t.status === 'COMPLETED').flatMap((t) => ((t.outputs?.artifacts ?? []) as unknown[]).map((artifact) => ({ task_id: t.id, artifact }))),
      tasks
    }
  })
}

export default planRoutes
