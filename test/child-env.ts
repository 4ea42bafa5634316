/**
 * The environment for a child process that is not part of the test harness (a dev server, a
 * scaffolded project's tools, the Dockerfile's steps): this process's own, without tap's hooks
 * (`NODE_OPTIONS`, `_TAPJS_*`), its child markers (`TAP*`) and V8's coverage folder
 * (`NODE_V8_COVERAGE`), and with tap's coverage of the child turned off. tap wraps every spawn and
 * puts its hook back into the child's `NODE_OPTIONS` whatever the environment says; only
 * `_TAPJS_PROCESSINFO_COVERAGE_=0` keeps the child from writing coverage. A child that runs the
 * sources through another loader (tsx) would write byte offsets of another transpilation of the
 * same files, and corrupt the merged report.
 */
export function harnessFreeEnv (drop: (name: string) => boolean = () => false): Record<string, string> {
  const env = Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => {
    const [name, value] = entry
    return value !== undefined && name !== 'NODE_OPTIONS' && name !== 'NODE_V8_COVERAGE' && !name.startsWith('_TAPJS') && !name.startsWith('TAP') && !drop(name)
  }))
  return { ...env, _TAPJS_PROCESSINFO_COVERAGE_: '0' }
}
