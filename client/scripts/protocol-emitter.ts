import { readFileSync } from 'node:fs'
import ts from 'typescript'

/** A JSON Schema as TypeBox builds it; only its own enumerable keys are read. */
export type Schema = Readonly<Record<string, unknown>>

/** One module of wire schemas: its TypeScript source (read for doc comments) and its runtime exports. */
export interface ProtocolModule {
  /** Path of the module's `.ts` source. Exports are emitted in the order they are declared there. */
  file: string
  /** The module's exports, as `import * as m from '...'` gives them. */
  exports: Readonly<Record<string, unknown>>
}

/** What {@link emitProtocol} turns into one self-contained TypeScript file. */
export interface EmitOptions {
  modules: readonly ProtocolModule[]
  /**
   * Exports to emit: schemas (as types, with every named schema they use) and string constants
   * (as `const`s).
   */
  roots: readonly string[]
  /** Comment lines at the top of the file, without `// `. */
  header: readonly string[]
}

/** Doc comments found in the source for a schema and, by property name, for its properties. */
interface Docs {
  doc?: string
  props: Map<string, Docs>
}

interface Declared {
  name: string
  value: unknown
  docs: Docs
}

// Validation-only keywords: they narrow values but do not change the TypeScript type.
const IGNORED = new Set(['format', 'description', 'title', 'default', 'pattern', 'minLength', 'maxLength', 'minimum', 'maximum', 'minItems', 'maxItems'])
const KNOWN = new Set([...IGNORED, 'type', 'properties', 'required', 'additionalProperties', 'patternProperties', 'items', 'anyOf', 'const'])
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/

function isSchema (value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && ('type' in value || 'anyOf' in value || 'const' in value)
}

/** A schema's JSON with sorted keys: TypeBox copies a schema it wraps (`Type.Optional`), so names are matched by shape. */
function shape (schema: unknown): string {
  if (typeof schema !== 'object' || schema === null) return JSON.stringify(schema)
  if (Array.isArray(schema)) return `[${schema.map(shape).join(',')}]`
  return `{${Object.keys(schema).sort().map((key) => `${JSON.stringify(key)}:${shape((schema as Record<string, unknown>)[key])}`).join(',')}}`
}

function literal (value: unknown, path: string): string {
  if (typeof value === 'string') return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  throw new Error(`${path}: unsupported const ${JSON.stringify(value)}`)
}

/** The last `/** … *\/` comment before `node`, its continuation lines aligned under the first. */
function jsDoc (node: ts.Node, text: string): string | undefined {
  const raw = (ts.getLeadingCommentRanges(text, node.pos) ?? []).map((r) => text.slice(r.pos, r.end)).filter((c) => c.startsWith('/**')).at(-1)
  return raw?.split('\n').map((line, i) => i === 0 ? line.trim() : ' ' + line.trim()).join('\n')
}

function indented (doc: string | undefined, indent: string): string {
  return doc === undefined ? '' : doc.split('\n').map((line) => indent + line).join('\n') + '\n'
}

/**
 * Doc comments of one source file, following the shapes TypeBox code takes: `Type.Object({...})`
 * literals (with spreads of local objects), `Type.Optional`/`Type.Array` wrappers, and calls of
 * local helper functions whose parameters end up as properties.
 */
function sourceDocs (file: string): Declared[] {
  const text = readFileSync(file, 'utf8')
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true)
  const consts = new Map<string, ts.Expression>()
  const functions = new Map<string, { parameters: ts.NodeArray<ts.ParameterDeclaration>, body: ts.Block }>()
  const exported: Array<{ name: string, statement: ts.VariableStatement }> = []
  for (const statement of source.statements) {
    if (ts.isFunctionDeclaration(statement) && statement.name !== undefined && statement.body !== undefined) {
      functions.set(statement.name.text, { parameters: statement.parameters, body: statement.body })
    }
    if (!ts.isVariableStatement(statement)) continue
    const isExported = statement.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword) === true
    for (const declaration of statement.declarationList.declarations) {
      if (!ts.isIdentifier(declaration.name) || declaration.initializer === undefined) continue
      consts.set(declaration.name.text, declaration.initializer)
      if (isExported) exported.push({ name: declaration.name.text, statement })
    }
  }

  const members = (object: ts.ObjectLiteralExpression, env: Map<string, ts.Expression>, into: Map<string, Docs>): void => {
    for (const member of object.properties) {
      if (ts.isSpreadAssignment(member)) {
        const spread = ts.isIdentifier(member.expression) ? consts.get(member.expression.text) : undefined
        if (spread !== undefined && ts.isObjectLiteralExpression(spread)) members(spread, env, into)
        continue
      }
      if (!(ts.isPropertyAssignment(member) || ts.isShorthandPropertyAssignment(member)) || !(ts.isIdentifier(member.name) || ts.isStringLiteral(member.name))) continue
      const value = ts.isPropertyAssignment(member) ? member.initializer : member.name
      const doc = jsDoc(member, text)
      into.set(member.name.text, { ...(doc !== undefined ? { doc } : {}), props: tree(value, env)?.props ?? new Map() })
    }
  }

  const tree = (expression: ts.Expression, env: Map<string, ts.Expression>): Docs | undefined => {
    if (ts.isIdentifier(expression)) {
      const bound = env.get(expression.text)
      return bound === undefined ? undefined : tree(bound, new Map())
    }
    if (!ts.isCallExpression(expression)) return undefined
    const callee = expression.expression
    const [first] = expression.arguments
    if (ts.isPropertyAccessExpression(callee) && ts.isIdentifier(callee.expression) && callee.expression.text === 'Type') {
      if (first === undefined) return undefined
      if (callee.name.text === 'Object' && ts.isObjectLiteralExpression(first)) {
        const props = new Map<string, Docs>()
        members(first, env, props)
        return { props }
      }
      return callee.name.text === 'Optional' || callee.name.text === 'Array' ? tree(first, env) : undefined
    }
    const helper = ts.isIdentifier(callee) ? functions.get(callee.text) : undefined
    const returned = helper?.body.statements.find(ts.isReturnStatement)?.expression
    if (helper === undefined || returned === undefined) return undefined
    const bound = new Map<string, ts.Expression>()
    helper.parameters.forEach((parameter, i) => {
      const argument = expression.arguments[i]
      if (ts.isIdentifier(parameter.name) && argument !== undefined) bound.set(parameter.name.text, argument)
    })
    return tree(returned, bound)
  }

  return exported.map(({ name, statement }) => {
    const doc = jsDoc(statement, text)
    const declaration = consts.get(name) as ts.Expression
    return { name, value: undefined, docs: { ...(doc !== undefined ? { doc } : {}), props: tree(declaration, new Map())?.props ?? new Map() } }
  })
}

/**
 * TypeScript declarations for wire schemas: a small JSON-Schema-to-TypeScript emitter for the
 * subset TypeBox builds in `src/protocol/` (objects, arrays, records, unions, literals and
 * primitives). A schema that is another export's value is referenced by that export's name.
 * Any keyword outside the subset is an error, so a schema change the emitter cannot express
 * stops the generator instead of producing a wrong type.
 */
export function emitProtocol (options: EmitOptions): string {
  const declared: Declared[] = []
  for (const module of options.modules) {
    for (const entry of sourceDocs(module.file)) declared.push({ ...entry, value: module.exports[entry.name] })
  }
  const names = new Map<string, string>()
  for (const { name, value } of declared) if (isSchema(value) && !names.has(shape(value))) names.set(shape(value), name)
  const used = new Set<string>()

  const check = (schema: Schema, path: string): void => {
    const unknown = Object.keys(schema).filter((key) => !KNOWN.has(key))
    if (unknown.length > 0) throw new Error(`${path}: unsupported keyword ${unknown.join(', ')}`)
  }

  const emit = (schema: Schema, docs: Docs | undefined, indent: string, path: string, top = false): string => {
    const name = top ? undefined : names.get(shape(schema))
    if (name !== undefined) {
      used.add(name)
      return name
    }
    check(schema, path)
    if (Array.isArray(schema.anyOf)) return (schema.anyOf as Schema[]).map((s, i) => emit(s, undefined, indent, `${path}/anyOf/${i}`)).join(' | ')
    if ('const' in schema) return literal(schema.const, path)
    switch (schema.type) {
      case 'string': return 'string'
      case 'integer':
      case 'number': return 'number'
      case 'boolean': return 'boolean'
      case 'null': return 'null'
      case 'array': {
        const item = emit(schema.items as Schema, docs, indent, `${path}/items`)
        return IDENTIFIER.test(item) ? `${item}[]` : `Array<${item}>`
      }
      case 'object': {
        if (schema.properties !== undefined) return `{\n${body(schema, docs, indent + '  ', path)}${indent}}`
        const patterns = Object.entries((schema.patternProperties ?? {}) as Record<string, Schema>)
        if (patterns.length > 1) throw new Error(`${path}: more than one patternProperties`)
        const [pattern] = patterns
        return `Record<string, ${pattern === undefined ? 'unknown' : emit(pattern[1], undefined, indent, `${path}/patternProperties`)}>`
      }
      // Type.Unknown(): any JSON value
      case undefined: return 'unknown'
      default: throw new Error(`${path}: unsupported type ${JSON.stringify(schema.type)}`)
    }
  }

  const body = (schema: Schema, docs: Docs | undefined, indent: string, path: string): string => {
    const required = new Set((schema.required ?? []) as string[])
    return Object.entries(schema.properties as Record<string, Schema>).map(([key, property]) => {
      const own = docs?.props.get(key)
      const type = emit(property, own, indent, `${path}/${key}`)
      return `${indented(own?.doc, indent)}${indent}${IDENTIFIER.test(key) ? key : literal(key, path)}${required.has(key) ? '' : '?'}: ${type}\n`
    }).join('')
  }

  const declaration = ({ name, value, docs }: Declared): string => {
    const doc = indented(docs.doc ?? `/** \`${name}\` of the server's wire schemas. */`, '')
    if (typeof value === 'string') return `${doc}export const ${name} = ${literal(value, name)}\n`
    if (!isSchema(value)) throw new Error(`${name}: not a schema or a string constant`)
    check(value, name)
    if (value.type === 'object' && value.properties !== undefined) return `${doc}export interface ${name} {\n${body(value, docs, '  ', name)}}\n`
    return `${doc}export type ${name} = ${emit(value, docs, '', name, true)}\n`
  }

  const byName = new Map(declared.map((d) => [d.name, d]))
  const pending = [...options.roots]
  for (const root of pending) {
    if (!byName.has(root)) throw new Error(`${root}: no such export`)
    used.add(root)
  }
  // emitting a declaration marks the names it uses; repeat until nothing new is reached
  let emitted = new Map<string, string>()
  for (let before = -1; before !== used.size;) {
    before = used.size
    emitted = new Map([...used].map((name) => [name, declaration(byName.get(name) as Declared)]))
  }
  const ordered = declared.filter((d) => emitted.has(d.name)).map((d) => emitted.get(d.name) as string)
  return `${options.header.map((line) => `// ${line}`.trimEnd()).join('\n')}\n\n${ordered.join('\n')}`
}
