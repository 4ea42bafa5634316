import { AgentError, BaseAgent, type AgentResult, type TaskContext, type TaskNode } from '../../src/agents/index.js'

/** Task agent `wordcount`: counts the words of `inputs.text` and reports the most frequent ones. */
class WordCount extends BaseAgent {
  readonly agentType = 'wordcount'

  async handleTask (task: TaskNode, context: TaskContext): Promise<AgentResult> {
    const text = task.inputs.text
    if (typeof text !== 'string') throw new AgentError('inputs.text must be a string', { retryable: false })
    const words = text.toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? []
    await context.progress(`counted ${words.length} words`, 0.5)
    const counts = new Map<string, number>()
    for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1)
    const top = [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 5).map(([word, count]) => ({ word, count }))
    return { task_id: task.id, outcome: 'completed', artifacts: [{ words: words.length, distinct: counts.size, characters: text.length, top }], notes: `${words.length} words` }
  }
}

export default new WordCount()
