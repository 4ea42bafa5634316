import type { ValidateFunction } from 'ajv'
import type { AgentCapability, AgentDefinition } from '../protocol/manifest.js'
import { AgentDefinition as AgentDefinitionSchema } from '../protocol/manifest.js'
import type { Agent, ManifestSpec } from './contract.js'
import { fillManifest } from './define-agent.js'
import { compileSchema, lazySchema, toIssues } from './json-schema.js'

/** A capability with its compiled input and output validators. */
export interface HostedCapability {
  readonly capability: AgentCapability
  readonly validateInput: ValidateFunction | undefined
  readonly validateOutput: ValidateFunction | undefined
}

/** An agent as the host keeps it: the author's object, its filled manifest and compiled schemas. */
export interface HostedAgent {
  readonly agent: Agent
  readonly manifest: AgentDefinition
  readonly capabilities: readonly HostedCapability[]
  /** The file it was loaded from (for messages), or a label for agents built in code. */
  readonly source: string
}

const checkManifest = lazySchema<AgentDefinition>(AgentDefinitionSchema)

/** Why a value is not a valid agent: a list of problems (empty when valid). */
function manifestProblems (manifest: AgentDefinition): string[] {
  if (!checkManifest(manifest)) {
    return toIssues(checkManifest.errors, 'manifest').map((i) => `${i.path} ${i.message}`)
  }
  const problems: string[] = []
  const names = new Set<string>()
  for (const cap of manifest.capabilities) {
    if (names.has(cap.name)) problems.push(`capability name "${cap.name}" is used twice`)
    names.add(cap.name)
    if (cap.interface_id === undefined && (cap.inputs === undefined || cap.outputs === undefined)) {
      problems.push(`capability "${cap.name}" needs inputs and outputs (or an interface_id)`)
    }
    if (manifest.metadata.requires_auth && !cap.injected_params.includes('user_context')) {
      problems.push(`capability "${cap.name}" must inject "user_context" because the agent requires auth`)
    }
  }
  if (manifest.status === 'published' && manifest.integrity_hash === undefined) {
    problems.push('a published manifest needs integrity_hash (64 hex characters)')
  }
  return problems
}

function compileOptional (schema: Record<string, unknown> | undefined, what: string): ValidateFunction | undefined {
  if (schema === undefined) return undefined
  try {
    return compileSchema(schema)
  } catch (err) {
    throw new Error(`${what} is not a valid JSON Schema: ${(err as Error).message}`)
  }
}

/**
 * Check that `value` is an agent (an object with `manifest` and an `assist` function), fill its
 * manifest's defaults, validate it (CAP.md §7) and compile its schemas.
 * @throws Error whose message says what is wrong; the loader adds the file path.
 */
export function hostAgent (value: unknown, source: string): HostedAgent {
  if (typeof value !== 'object' || value === null) {
    throw new Error(`the default export must be an agent object (see defineAgent), got ${value === null ? 'null' : typeof value}`)
  }
  const candidate = value as Partial<Agent>
  if (typeof candidate.assist !== 'function') throw new Error('the agent has no assist(request, session, response) function')
  if (typeof candidate.manifest !== 'object' || candidate.manifest === null) throw new Error('the agent has no manifest object')
  for (const hook of ['startup', 'shutdown'] as const) {
    if (candidate[hook] !== undefined && typeof candidate[hook] !== 'function') throw new Error(`${hook} must be a function`)
  }
  if (candidate.backends !== undefined && !(Array.isArray(candidate.backends) && candidate.backends.every((b) => typeof b === 'string' && b !== ''))) {
    throw new Error('backends must be an array of backend names')
  }
  const spec = candidate.manifest as unknown as ManifestSpec
  if (typeof spec.metadata !== 'object' || spec.metadata === null) throw new Error('manifest/metadata is required')
  const manifest = fillManifest(spec)
  const problems = manifestProblems(manifest)
  if (problems.length > 0) throw new Error(`invalid manifest: ${problems.join('; ')}`)
  const capabilities = manifest.capabilities.map((capability) => ({
    capability,
    validateInput: compileOptional(capability.inputs, `capability "${capability.name}" inputs`),
    validateOutput: compileOptional(capability.outputs, `capability "${capability.name}" outputs`)
  }))
  return { agent: candidate as Agent, manifest, capabilities, source }
}
