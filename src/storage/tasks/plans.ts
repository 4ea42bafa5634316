import { AH_ERR_TASK_INVALID, withDetails } from '../../errors.js'
import type { ExecutionPlan } from '../../protocol/contract.js'
import { findCycle } from './task-graph.js'
import type { NewTask, TaskNode } from './task.js'

/** The longest task id of the graph (what `POST /v1/tasks` and the task routes take). */
const MAX_TASK_ID = 128

/** The graph id of a plan's task: `<plan id>.<task id>`. */
export const planTaskId = (planId: string, taskId: string): string => `${planId}.${taskId}`

/**
 * An ExecutionPlan as tasks of the graph, to be created in one step: each task goes to the task
 * agents of its `assigned_agent`, with its priority, its `retry_policy.max_attempts`, the plan task
 * itself as `inputs.task` (what a refactor agent takes), and `metadata.plan_id` / `estimated_hours`.
 * @param agentTypes the task agent types this server runs
 * @throws AH_ERR_TASK_INVALID (400) naming every unknown agent and dependency, a repeated id, ids too long together, or a cycle
 */
export function planTasks (plan: ExecutionPlan, agentTypes: ReadonlySet<string>): NewTask[] {
  const ids = new Set<string>()
  const repeated = plan.tasks.filter((t) => ids.size === ids.add(t.id).size).map((t) => t.id)
  if (repeated.length > 0) throw withDetails(new AH_ERR_TASK_INVALID(`task ids used twice: ${repeated.join(', ')}`), { repeated })
  const long = plan.tasks.map((t) => planTaskId(plan.id, t.id)).filter((id) => id.length > MAX_TASK_ID)
  if (long.length > 0) throw withDetails(new AH_ERR_TASK_INVALID(`task ids would be longer than ${MAX_TASK_ID} characters (\`<plan id>.<task id>\`): ${long.join(', ')}`), { too_long: long })
  const unknownAgents = [...new Set(plan.tasks.map((t) => t.assigned_agent).filter((a) => !agentTypes.has(a)))]
  const unknownDependencies = Object.entries(plan.dependencies).flatMap(([task, deps]) => [
    ...(ids.has(task) ? [] : [{ task, dependency: null }]),
    ...deps.filter((d) => !ids.has(d)).map((dependency) => ({ task, dependency }))
  ])
  if (unknownAgents.length > 0 || unknownDependencies.length > 0) {
    const parts = [
      ...(unknownAgents.length > 0 ? [`no task agent here for ${unknownAgents.map((a) => `"${a}"`).join(', ')} (running: ${[...agentTypes].join(', ') || 'none'})`] : []),
      ...unknownDependencies.map((u) => u.dependency === null ? `dependencies name a task the plan lacks: "${u.task}"` : `"${u.task}" depends on "${u.dependency}", which the plan lacks`)
    ]
    throw withDetails(new AH_ERR_TASK_INVALID(parts.join('; ')), { unknown_agents: unknownAgents, unknown_dependencies: unknownDependencies })
  }
  const cycle = findCycle(plan.tasks.map((t) => ({ id: t.id, dependency_ids: plan.dependencies[t.id] ?? [] }) as unknown as TaskNode))
  if (cycle !== undefined) throw withDetails(new AH_ERR_TASK_INVALID(`dependency cycle: ${cycle.join(' -> ')}`), { cycle })
  return plan.tasks.map((t) => ({
    id: planTaskId(plan.id, t.id),
    type: t.assigned_agent,
    priority: t.priority,
    ...(typeof t.retry_policy?.max_attempts === 'number' ? { max_attempts: t.retry_policy.max_attempts } : {}),
    inputs: { task: t },
    metadata: { plan_id: plan.id, plan_task_id: t.id, estimated_hours: t.estimated_hours },
    dependency_ids: (plan.dependencies[t.id] ?? []).map((d) => planTaskId(plan.id, d))
  }))
}

/**
 * The critical path: the chain of dependencies with the most estimated hours in all (ties: the
 * first in the given order), and those hours, which is how long the plan takes with unlimited workers.
 */
export function criticalPath (tasks: ReadonlyArray<{ id: string, hours: number, dependencies: readonly string[] }>): { path: string[], hours: number } {
  const byId = new Map(tasks.map((t) => [t.id, t]))
  const best = new Map<string, { hours: number, path: string[] }>()
  const longest = (id: string): { hours: number, path: string[] } => {
    const known = best.get(id)
    if (known !== undefined) return known
    const task = byId.get(id) as (typeof tasks)[number]
    let before = { hours: 0, path: [] as string[] }
    for (const dep of task.dependencies) {
      if (!byId.has(dep)) continue
      const chain = longest(dep)
      if (chain.hours > before.hours) before = chain
    }
    const result = { hours: before.hours + task.hours, path: [...before.path, id] }
    best.set(id, result)
    return result
  }
  let top = { hours: 0, path: [] as string[] }
  for (const task of tasks) {
    const chain = longest(task.id)
    if (chain.hours > top.hours) top = chain
  }
  return top
}
