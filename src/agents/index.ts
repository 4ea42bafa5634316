/**
 * What agent authors import: `defineAgent`, `SafeAgentError` and the contract's types.
 * (A plain default-exported `{ manifest, assist }` object with no imports works too.)
 */
export { defineAgent } from './define-agent.js'
export { RunAbortedError } from '../errors.js'
export type { AbortKind } from '../errors.js'
export { SafeAgentError } from './contract.js'
export { capBridge, type CapBridge } from './cap-bridge.js'
export { BackendError } from '../backends/errors.js'
export { traceparentOf } from '../backends/protocol.js'
export type { AgentProtocol, Message, ProtocolContext, ProtocolResponse, StreamChunk, Tool, ToolRegistry } from '../backends/protocol.js'
export type {
  Agent, AgentDefinition, AgentHost, AgentRequest, AgentSpec, EventSink, Interaction, JsonObject, LogLevel, ManifestSpec,
  RecallHit, ResponseHandler, SessionHandle, SessionIdentity, StreamHandle
} from './contract.js'
export { AgentError, BaseAgent } from '../runtime/base-agent.js'
export type { TaskContext } from '../runtime/base-agent.js'
export type { AgentResult, AgentRuntime } from '../runtime/agent-runtime.js'
export type { TaskNode } from '../runtime/task.js'
