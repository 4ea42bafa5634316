import { AgentError, BaseAgent, type AgentResult, type TaskContext, type TaskNode } from '../../src/agents/index.js'

interface Counted { words: number, distinct: number, top: Array<{ word: string, count: number }> }

/**
 * Task agent `summarize`: runs after its `wordcount` dependencies and writes a one-paragraph
 * summary of their counts (the task graph only hands it the task once they are COMPLETED).
 */
class Summarize extends BaseAgent {
  readonly agentType = 'summarize'

  async handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult> {
    const counted: Array<{ id: string, stats: Counted }> = []
    for (const id of task.dependency_ids) {
      const dep = await context.runtime.getTask(id)
      const stats = (dep?.outputs?.artifacts as Counted[] | undefined)?.[0]
      if (stats === undefined) throw new AgentError(`dependency ${id} has no word count`, { retryable: false })
      counted.push({ id, stats })
    }
    if (counted.length === 0) throw new AgentError('summarize needs wordcount dependencies', { retryable: false })
    const total = counted.reduce((n, c) => n + c.stats.words, 0)
    const top = new Map<string, number>()
    for (const c of counted) for (const { word, count } of c.stats.top) top.set(word, (top.get(word) ?? 0) + count)
    const common = [...top.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 3).map(([w]) => `"${w}"`)
    const summary = `${counted.length} text${counted.length === 1 ? '' : 's'}, ${total} words in all; most frequent: ${common.join(', ')}.`
    return { task_id: task.id, outcome: 'completed', artifacts: [{ summary, total_words: total, sources: counted.map((c) => c.id) }], notes: summary }
  }
}

export default new Summarize()
