import { Type, type Static } from 'typebox'
import { Uuid } from './common.js'

/** `POST /v1/assist/:request_id/cancel` (202): the run was told to stop, wherever it runs. */
export const CancelAccepted = Type.Object({
  request_id: Uuid,
  cancelled: Type.Literal(true)
}, { additionalProperties: false, title: 'CancelAccepted' })
export type CancelAccepted = Static<typeof CancelAccepted>
