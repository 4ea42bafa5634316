/**
 * `@agent-host/client`: a typed client of agent-host's Coreason Agent Protocol (CAP) API, for
 * Node.js 20+ and browsers (plain ESM; its one import is `eventsource-parser`).
 * @packageDocumentation
 */
export { AgentHostClient, type CallOptions, type ClientOptions } from './agent-host-client.js'
export type { AssistStream, StreamOptions } from './assist-stream.js'
export { AgentHostError, type AgentHostErrorOptions, type ClientErrorCode } from './agent-host-error.js'
export { buildEnvelope, type EnvelopeInput } from './build-envelope.js'
export { buildResumeEnvelope, isInterrupted, type InterruptedResponse, type InterruptedStream, type ResumeTarget } from './interrupts.js'
export type { ResumeOptions } from './resume-policy.js'
export { SSE_EVENT_NAME } from './protocol.js'
export type * from './protocol.js'
