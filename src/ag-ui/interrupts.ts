import type { Interrupt as AgUiInterrupt, ResumeEntry } from '@ag-ui/core'
import type { AssistEngine } from '../assist/engine.js'
import { viewerOf } from '../auth/scopes.js'
import { AH_ERR_INTERRUPT_NOT_FOUND, AH_ERR_VALIDATION, withDetails } from '../errors.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { Interrupt, ResumeAnswer } from '../protocol/interrupts.js'
import type { Identity } from '../storage/api-keys.js'
import type { InterruptStore } from '../storage/interrupts.js'
import type { RunReader } from '../storage/run-ledger.js'
import type { RunRecord } from '../storage/runs.js'
import { sees } from '../storage/tenants.js'

/** The answer an approval takes, as a JSON Schema (AG-UI's `responseSchema`): CAP's `ApprovalValue`. */
const APPROVAL_SCHEMA = {
  type: 'object',
  properties: { approved: { type: 'boolean' }, comment: { type: 'string', maxLength: 4000 } },
  required: ['approved'],
  additionalProperties: false
}

/**
 * A CAP interrupt (one question of a run that stopped to ask) as AG-UI's `Interrupt`, which
 * RUN_FINISHED's interrupt outcome carries: the same `id` (a resume entry answers it by that id),
 * `reason` the CAP `kind` (`input` or `approval`; `auth` when it asks for credentials), `message`,
 * `responseSchema` the input's `schema` (an approval's: `{ approved, comment? }`), `expiresAt`
 * `expires_at`, and what an approval is of (`call`) in `metadata.call`.
 */
export function agUiInterrupt (interrupt: Interrupt): AgUiInterrupt {
  const schema = interrupt.kind === 'approval' ? APPROVAL_SCHEMA : interrupt.schema
  return {
    id: interrupt.id,
    reason: interrupt.reason ?? interrupt.kind,
    message: interrupt.message,
    ...(schema !== undefined ? { responseSchema: schema } : {}),
    expiresAt: interrupt.expires_at,
    ...(interrupt.call !== undefined ? { metadata: { call: interrupt.call } } : {})
  }
}

/** What a run's `resume` list asks: CAP answers to the questions, or to give them up. */
export type ResumeIntent = { answers: ResumeAnswer[] } | { cancelled: string[] }

/**
 * AG-UI's `resume` list as what CAP can do with it. Entries `resolved` are CAP's `payload.resume`
 * answers (`payload` is the value; the engine checks it against the question); entries `cancelled`
 * give the questions up (the waiting run is ended, as `POST /v1/assist/{id}/cancel` ends it). CAP
 * answers a run's questions or ends the run, never both at once, so a list that mixes the two is
 * refused.
 * @throws AH_ERR_VALIDATION for a list that both answers and cancels
 */
export function resumeIntent (entries: ReadonlyArray<Pick<ResumeEntry, 'interruptId' | 'status' | 'payload'>>): ResumeIntent {
  const cancelled = entries.filter((entry) => entry.status === 'cancelled')
  if (cancelled.length === 0) return { answers: entries.map((entry) => ({ interrupt_id: entry.interruptId, value: entry.payload as unknown })) }
  if (cancelled.length === entries.length) return { cancelled: cancelled.map((entry) => entry.interruptId) }
  const path = '/resume'
  throw withDetails(new AH_ERR_VALIDATION(`Invalid request: ${path} both answers and cancels interrupts: a run's questions are answered together, or given up together`), {
    errors: [{ path, message: 'must have every entry "resolved", or every entry "cancelled"' }]
  })
}

/** What giving questions up reads and ends. */
export interface GiveUp {
  interrupts: Pick<InterruptStore, 'inSession'>
  runs: Pick<RunReader, 'get'>
  engine: Pick<AssistEngine, 'cancel'>
}

/**
 * Give up the questions `ids` of a run of session `sessionId` that waits for its caller (AG-UI's
 * `cancelled` resume entries): the run is ended as `POST /v1/assist/{id}/cancel` ends a waiting run
 * (its questions take no answer any more; audited as `assist.cancel`). Questions whose run is over
 * already (ended, expired, gone on) are given up already: nothing is done.
 * @throws AH_ERR_INTERRUPT_NOT_FOUND when no run of this agent in the session asked them, or it is another caller's
 */
export async function giveUp (stores: GiveUp, question: { sessionId: string, agentId: string, ids: readonly string[] }, identity: Identity): Promise<void> {
  const chain = (await stores.interrupts.inSession(question.sessionId)).find((c) => c.interrupts.some((i) => question.ids.includes(i.id)))
  if (chain === undefined || chain.agent_id !== question.agentId || !sees(viewerOf(identity), chain.owner_key)) throw new AH_ERR_INTERRUPT_NOT_FOUND(question.ids[0] as string)
  if (chain.state !== 'waiting') return
  // the run that asked last was stored when it started, before it asked
  const last = await stores.runs.get(chain.last_run) as RunRecord
  await stores.engine.cancel((JSON.parse(last.envelope) as ServiceRequest).request_id, identity)
}
