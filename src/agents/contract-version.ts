import semver from 'semver'

/** The version of the agent contract (seed 003) this host implements. */
export const CONTRACT_VERSION = '2.0.0'

/**
 * Whether an agent written against contract `agentVersion` may run on a host that implements
 * `contractVersion` (seed 003, "Version Compatibility"): the major versions match and the agent's
 * minor is the same or higher; patch levels and pre-release tags are ignored. Below 1.0.0 every
 * minor may break (semver §4), so there the minors must match too. A version that is not semver
 * (`2.0`, `v2`, `2.0.0.1`, empty) is never compatible.
 */
export function checkCompatibility (agentVersion: string, contractVersion: string): boolean {
  const agent = semver.parse(agentVersion)
  const contract = semver.parse(contractVersion)
  if (agent === null || contract === null) return false
  if (agent.major !== contract.major) return false
  return contract.major === 0 ? agent.minor === contract.minor : agent.minor >= contract.minor
}

/**
 * Why an agent written against `agentVersion` cannot run here, naming both versions, or undefined
 * when it can (the loader refuses such an agent at boot with this message).
 */
export function incompatibility (agentVersion: string, contractVersion = CONTRACT_VERSION): string | undefined {
  if (checkCompatibility(agentVersion, contractVersion)) return undefined
  if (semver.parse(agentVersion) === null) return `its contractVersion "${agentVersion}" is not a semantic version (major.minor.patch); this host implements contract ${contractVersion}`
  return `it was written for contract ${agentVersion}, and this host implements contract ${contractVersion} (the major versions must match and the agent's minor may not be lower)`
}
