import { Type, type Static } from 'typebox'
import { DateTime } from './common.js'

const closed = { additionalProperties: false } as const

/** Where a push notification config's delivery stands. */
export const PushDeliveryState = Type.Union([
  Type.Literal('active', { description: 'Pushing: updates are sent as the task makes them (or retried after a failure)' }),
  Type.Literal('done', { description: 'The task\'s final status was pushed: nothing more will be sent' }),
  Type.Literal('failed', { description: 'An update failed A2A_PUSH_MAX_ATTEMPTS times: nothing more is sent (saving the config again, same id, tries again)' })
], { title: 'PushDeliveryState' })

/**
 * The delivery state of one A2A push notification config (`GET /v1/a2a/push-deliveries`): what an
 * A2A config answer cannot carry. Its token and credentials are not shown.
 */
export const PushDelivery = Type.Object({
  /** Its place in the list: page on with `after`. */
  seq: Type.Integer({ minimum: 1 }),
  /** The config's id (A2A `TaskPushNotificationConfig.id`). */
  config_id: Type.String(),
  /** The A2A task id. */
  task_id: Type.String(),
  agent_id: Type.String(),
  url: Type.String(),
  state: PushDeliveryState,
  /** Updates the receiver took (answered 2xx); the first is the task itself. */
  delivered: Type.Integer({ minimum: 0 }),
  /** Packets of the task's journal not pushed yet (and the task itself until it is): about the updates to come, 0 once `done`. */
  pending: Type.Integer({ minimum: 0 }),
  /** Failed attempts of the update now pending (0 after a success). */
  attempts: Type.Integer({ minimum: 0 }),
  /** The last HTTP status a receiver answered; null before any answer. */
  last_status: Type.Union([Type.Integer(), Type.Null()]),
  /** Why the last attempt failed (`HTTP 500`, a timeout, a refused connection or address); null after a success. */
  last_error: Type.Union([Type.String(), Type.Null()]),
  /** When the pending update is tried (again); null unless `active`. */
  next_attempt_at: Type.Union([DateTime, Type.Null()]),
  created_at: DateTime
}, { ...closed, title: 'PushDelivery' })
export type PushDelivery = Static<typeof PushDelivery>

/** A page of delivery states, oldest config first; `next` is the cursor to go on from. */
export const PushDeliveryPage = Type.Object({
  deliveries: Type.Array(PushDelivery),
  next: Type.Integer({ minimum: 0 })
}, { ...closed, title: 'PushDeliveryPage' })
export type PushDeliveryPage = Static<typeof PushDeliveryPage>
