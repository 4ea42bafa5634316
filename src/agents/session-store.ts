import type { Interaction, JsonObject, RecallHit, SessionHandle, SessionIdentity } from './contract.js'

/**
 * Where sessions live. The host opens a {@link SessionHandle} for every `/v1/assist` call and records
 * the interaction when the run ends. The in-memory store below is the default for now; a durable
 * store implements the same interface.
 */
export interface SessionStore {
  open(sessionId: string, identity: SessionIdentity): SessionHandle
  /** Append one finished interaction to the session's history. */
  record(sessionId: string, interaction: Interaction): Promise<void>
  close(): Promise<void>
}

interface SessionData {
  interactions: Interaction[]
  values: Map<string, unknown>
}

function words (text: string): string[] {
  return text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []
}

/** Share of the query's distinct words that occur in `text`, 0..1. */
function score (queryWords: Set<string>, text: string): number {
  if (queryWords.size === 0) return 0
  const have = new Set(words(text))
  let hits = 0
  for (const w of queryWords) if (have.has(w)) hits++
  return hits / queryWords.size
}

/** Sessions kept in process memory: lost at restart. */
export class MemorySessionStore implements SessionStore {
  readonly #sessions = new Map<string, SessionData>()

  #data (sessionId: string): SessionData {
    let data = this.#sessions.get(sessionId)
    if (data === undefined) {
      data = { interactions: [], values: new Map() }
      this.#sessions.set(sessionId, data)
    }
    return data
  }

  open (sessionId: string, identity: SessionIdentity): SessionHandle {
    const data = this.#data(sessionId)
    return {
      session_id: sessionId,
      identity,
      history: async (limit = 10, offset = 0) => {
        const end = Math.max(0, data.interactions.length - Math.max(0, offset))
        return data.interactions.slice(Math.max(0, end - Math.max(0, limit)), end)
      },
      recall: async (query, limit = 5, threshold = 0) => {
        const q = new Set(words(query))
        const hits: RecallHit[] = []
        for (const i of data.interactions) {
          hits.push({ kind: 'interaction', ref: i.request_id, score: score(q, JSON.stringify([i.input, i.output])), content: i as unknown as JsonObject })
        }
        for (const [key, value] of data.values) {
          hits.push({ kind: 'value', ref: key, score: score(q, `${key} ${JSON.stringify(value)}`), content: { key, value } })
        }
        return hits.filter((h) => h.score > 0 && h.score >= threshold).sort((a, b) => b.score - a.score).slice(0, limit)
      },
      store: async (key, value) => {
        data.values.set(key, structuredClone(value))
      },
      get: async <T>(key: string, fallback?: T) => {
        return data.values.has(key) ? structuredClone(data.values.get(key)) as T : fallback
      }
    }
  }

  async record (sessionId: string, interaction: Interaction): Promise<void> {
    this.#data(sessionId).interactions.push(interaction)
  }

  async close (): Promise<void> {
    this.#sessions.clear()
  }
}
