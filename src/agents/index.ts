/**
 * What agent authors import: `defineAgent` (CAP agents), `defineContractAgent` (seed 003's contract
 * agents), `SafeAgentError` and the contracts' types.
 * (A plain default-exported `{ manifest, assist }` object with no imports works too.)
 */
export { defineAgent } from './define-agent.js'
export { defineContractAgent, type ContractAgentSpec, type ContractCapability, type ContractContext } from './define-contract-agent.js'
export { CONTRACT_VERSION, checkCompatibility } from './contract-version.js'
export type { AgentInput, AgentOutput, AgentStatus, Artifact, ContractEvent } from '../protocol/contract.js'
// the errors agent code throws or meets, under the names agents know them by (the catalogue's codes in src/errors.ts)
export {
  AH_ERR_AGENT_SAFE as SafeAgentError, AH_ERR_BACKEND_FAILED as BackendError, AH_ERR_RUN_ABORTED as RunAbortedError,
  AH_ERR_TASK_AGENT_FAILED as AgentError
} from '../errors.js'
export type { AbortKind } from '../errors.js'
export { capBridge, type CapBridge } from './cap-bridge.js'
export { traceparentOf } from '../backends/protocol.js'
export type { AgentProtocol, Message, ProtocolContext, ProtocolResponse, StreamChunk, Tool, ToolRegistry } from '../backends/protocol.js'
export type {
  Agent, AgentDefinition, AgentHost, AgentRequest, AgentSpec, EventSink, Interaction, InterruptRequest, JsonObject, LogLevel, ManifestSpec,
  RecallHit, ResponseHandler, SessionHandle, SessionIdentity, StreamHandle
} from './contract.js'
export { BaseAgent } from '../runtime/base-agent.js'
export type { TaskContext } from '../runtime/base-agent.js'
export type { AgentResult, AgentRuntime } from '../runtime/agent-runtime.js'
export type { TaskNode } from '../storage/tasks/task.js'
