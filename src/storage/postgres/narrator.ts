import type pg from 'pg'
import type { AppendedEvent } from '../events.js'
import { inTransaction, PG_LOCKS } from './database.js'
import type { PgEventStore } from './events.js'
import { conversationsToNarrate, narrationQuery, narrationStep, TASK_RESULT_TYPES, type NarrationHint, type NarrationStep, type TaskNarrator, type TaskResultRow } from '../tasks/narration.js'

const LOCK = 'SELECT pg_advisory_xact_lock($1)'
const FOLLOWED = 'SELECT seq FROM narrator_state WHERE id = 1'
const SET_FOLLOWED = 'UPDATE narrator_state SET seq = $1 WHERE id = 1'
const RESULTS = `SELECT seq, session_id, owner_key, type, body FROM events
  WHERE seq > $1 AND kind = 'task' AND type = ANY($2::text[]) AND session_id IS NOT NULL ORDER BY seq LIMIT $3`
const PLACE = 'SELECT seq FROM narrations WHERE session_id = $1'
const SET_PLACE = 'INSERT INTO narrations (session_id, seq) VALUES ($1, $2) ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq'

/**
 * The narrator on PostgreSQL (see {@link TaskNarrator}): the rules of `narrator.ts` over the
 * `narrator_state` and `narrations` tables and the {@link PgEventStore}, for any number of
 * instances following one event log.
 *
 * Each step is one transaction that first takes the `PG_LOCKS.narrator` advisory lock: two
 * instances reading the same place would otherwise both narrate what follows it. The lock is held
 * to the commit, so the next narrator reads the places this one wrote. Its events are appended last
 * (`appendIn` takes `PG_LOCKS.events`, always after the narrator's lock: one order, no deadlock, and
 * the event lock, which every writer of the log waits for, held as briefly as it can be), and
 * announced once committed.
 */
export class PgNarrator implements TaskNarrator {
  readonly #pool: pg.Pool
  readonly #events: PgEventStore

  constructor (pool: pg.Pool, events: PgEventStore) {
    this.#pool = pool
    this.#events = events
  }

  async narrate (conversationId: string, hint?: NarrationHint, owner: string | null = null): Promise<number | undefined> {
    const [appended, step] = await inTransaction(this.#pool, async (client) => {
      await client.query(LOCK, [PG_LOCKS.narrator])
      const step = await this.#step(client, conversationId, hint, owner)
      return [await this.#events.appendIn(client, step.event, 'narrator'), step] as const
    })
    this.#events.announce(appended)
    return step.place === undefined ? undefined : appended.seq
  }

  async follow (limit = 500): Promise<number> {
    const [appended, spoken] = await inTransaction(this.#pool, async (client) => {
      await client.query(LOCK, [PG_LOCKS.narrator])
      const followed = ((await client.query<{ seq: number }>(FOLLOWED)).rows[0] as { seq: number }).seq
      // as in SQLite, a negative limit is no limit
      const { rows } = await client.query<TaskResultRow>(RESULTS, [followed, TASK_RESULT_TYPES, limit < 0 ? null : limit])
      const steps: NarrationStep[] = []
      for (const { conversation, owner, hint } of conversationsToNarrate(rows)) steps.push(await this.#step(client, conversation, hint, owner))
      const last = rows.at(-1)
      if (last !== undefined) await client.query(SET_FOLLOWED, [last.seq])
      // one conversation's narration never reads another's (each reads its owner's events, and never
      // the narrator's own), so all of them are appended at the end
      const appended: AppendedEvent[] = []
      for (const step of steps) appended.push(await this.#events.appendIn(client, step.event, 'narrator'))
      return [appended, steps.filter((s) => s.place !== undefined).length] as const
    })
    for (const event of appended) this.#events.announce(event)
    return spoken
  }

  /** A conversation's narration, its place moved when the gate opens; its event is left to the caller to append. */
  async #step (client: pg.ClientBase, conversationId: string, hint: NarrationHint | undefined, owner: string | null): Promise<NarrationStep> {
    // an owner's conversation is kept apart from another's of the same id (text cannot hold SQLite's NUL separator)
    const place = JSON.stringify([owner, conversationId])
    const since = (await client.query<{ seq: number }>(PLACE, [place])).rows[0]?.seq ?? 0
    const step = narrationStep(conversationId, hint, owner, since, await this.#events.listIn(client, narrationQuery(conversationId, owner, since)))
    if (step.place !== undefined) await client.query(SET_PLACE, [place, step.place])
    return step
  }
}
