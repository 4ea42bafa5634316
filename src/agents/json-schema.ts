import { readFileSync } from 'node:fs'
import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { SemVer } from '../protocol/manifest.js'
import { COMMON_EVENTS } from '../protocol/contract.js'
import { AH_ERR_CONFIG_INVALID } from '../errors.js'

// ajv-formats is CommonJS; under NodeNext its default import is the module namespace.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default

/** One failing path of a validation, as reported in `details.errors`. */
export interface SchemaIssue {
  path: string
  message: string
}

// ajv-formats' uuid also admits a `urn:uuid:` prefix; CAP ids are bare RFC 4122 strings.
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** An Ajv instance with the standard formats (and a strict `uuid`). */
export function createAjv (options: Options = {}): Ajv {
  const ajv = new Ajv({ allErrors: true, strict: false, ...options })
  addFormats(ajv)
  ajv.addFormat('uuid', UUID)
  return ajv
}

/**
 * The Ajv instance for schemas that come from agents (capability `inputs`/`outputs`) and for the
 * host's own strict checks of what agents emit. No coercion, no defaults: it only judges.
 */
export const agentAjv = createAjv({ coerceTypes: false, useDefaults: false })

/** Compile a JSON Schema; throws with Ajv's message when the schema itself is invalid. */
export function compileSchema<T = unknown> (schema: object): ValidateFunction<T> {
  return agentAjv.compile<T>(schema)
}

/**
 * A validator of one of the host's own schemas, compiled on its first call rather than when its
 * module loads: every process (a server, a worker, a CLI command) loads them all and most use few,
 * and compiling them all took some 150 ms of each start. Called as Ajv's own; `errors` is the
 * last call's. An invalid schema throws at its first call.
 * @param ajv the Ajv instance to compile with, made when first needed (default: {@link agentAjv})
 */
export function lazySchema<T = unknown> (schema: object, ajv: () => Ajv = () => agentAjv): ValidateFunction<T> {
  let compiled: ValidateFunction<T> | undefined
  const validate = ((data: unknown): data is T => {
    compiled ??= ajv().compile<T>(schema)
    const valid = compiled(data)
    validate.errors = compiled.errors
    return valid
  }) as ValidateFunction<T>
  return validate
}

/** Values as a reader writes them: `"a", "b"`. */
function quoted (values: readonly unknown[]): string {
  return values.map((v) => JSON.stringify(v)).join(', ')
}

/** The values a `const` or `enum` error allows (none for other keywords). */
function allowedValues (e: ErrorObject): unknown[] {
  if (e.keyword === 'const') return [(e.params as { allowedValue: unknown }).allowedValue]
  if (e.keyword === 'enum') return (e.params as { allowedValues: unknown[] }).allowedValues
  return []
}

/** "must be" the one value, or "must be one of" the values. */
function mustBe (values: readonly unknown[]): string {
  return values.length === 1 ? `must be ${quoted(values)}` : `must be one of ${quoted(values)}`
}

/**
 * An error's message, naming the allowed values of a `const` or `enum`, and without a long regular
 * expression a reader cannot use (the semantic version's above all).
 */
function readable (e: ErrorObject): string {
  if (e.keyword === 'const' || e.keyword === 'enum') return mustBe(allowedValues(e))
  if (e.keyword !== 'pattern') return e.message ?? 'is invalid'
  const pattern = String((e.params as { pattern: string }).pattern)
  if (pattern === (SemVer as { pattern?: string }).pattern) return 'must be a semantic version such as 1.0.0 (MAJOR.MINOR.PATCH, an optional -pre-release and +build)'
  return pattern.length > 60 ? 'is not in the expected format' : e.message ?? 'is invalid'
}

/** The typed common events' `data` validators (seed 003 `EVENTS`), by event type: one compiled set for the contract check and the bus. */
export const COMMON_EVENT_DATA: ReadonlyMap<string, ValidateFunction> = new Map(Object.entries(COMMON_EVENTS).map(([type, schema]) => [type, lazySchema(schema)]))

/**
 * A choice of values (an `anyOf` or `oneOf` whose every branch failed only by its `const`, `enum` or
 * `type` at the choice's own place, as a TypeBox union of literals does) as one error naming all the
 * values, in place of Ajv's one error per branch and one for the choice.
 */
function collapseChoices (errors: ErrorObject[]): ErrorObject[] {
  const dropped = new Set<ErrorObject>()
  const replaced = new Map<ErrorObject, ErrorObject>()
  for (const choice of errors) {
    if (choice.keyword !== 'anyOf' && choice.keyword !== 'oneOf') continue
    const branches = errors.filter((e) => e.schemaPath.startsWith(`${choice.schemaPath}/`))
    const values = branches.flatMap(allowedValues)
    if (values.length === 0 || branches.some((e) => e.instancePath !== choice.instancePath || !['const', 'enum', 'type'].includes(e.keyword))) continue
    for (const e of branches) dropped.add(e)
    const allowed = [...new Set(values)]
    replaced.set(choice, { ...choice, keyword: 'enum', params: { allowedValues: allowed }, message: mustBe(allowed) })
  }
  return errors.filter((e) => !dropped.has(e)).map((e) => replaced.get(e) ?? e)
}

/**
 * The JSON file a setting names (A2A_AGENTS_FILE, BUDGETS_FILE), read and held to `check`; every
 * problem is one line of one boot error naming the setting and the file. `problem` says an issue
 * in the file's own words; `fail` refuses the file with more problems its reader found.
 * @throws AH_ERR_CONFIG_INVALID when it cannot be read as JSON or breaks the schema
 */
export function settingsFile<T> (setting: string, path: string, check: ValidateFunction<T>, problem: (issue: SchemaIssue) => string = (i) => `${i.path}: ${i.message}`): { parsed: T, fail: (problems: string[]) => never } {
  const fail = (problems: string[]): never => {
    throw new AH_ERR_CONFIG_INVALID(`env/${setting} ${path}:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'))
  } catch (err) {
    fail([`cannot be read as JSON: ${(err as Error).message}`])
  }
  if (!check(parsed)) fail(toIssues(check.errors).map(problem))
  return { parsed: parsed as T, fail }
}

/**
 * Turn Ajv errors into `{ path, message }` pairs, `path` a JSON Pointer under `root`; a `const`,
 * an `enum` and a choice of values say which values are allowed (`must be one of "a", "b"`).
 */
export function toIssues (errors: ErrorObject[] | null | undefined, root = ''): SchemaIssue[] {
  return collapseChoices(errors ?? []).map((e) => {
    let path = root + e.instancePath
    if (e.keyword === 'required') path += '/' + String((e.params as { missingProperty: string }).missingProperty)
    if (e.keyword === 'additionalProperties') path += '/' + String((e.params as { additionalProperty: string }).additionalProperty)
    return { path: path === '' ? '/' : path, message: readable(e) }
  })
}
