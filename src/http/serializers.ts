import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'

type Factory = ReturnType<typeof SerializerSelector>
type Serializer = ReturnType<ReturnType<Factory>>

const build = SerializerSelector()
const compiled = new WeakMap<object, Serializer>()
/** The serializers not compiled yet, each as the call that compiles it. */
const uncompiled = new Set<() => Serializer>()

/** Compile every response serializer that has not been used yet (a test's proof that every response schema compiles): how many. */
export function compilePendingSerializers (): number {
  const pending = [...uncompiled]
  for (const force of pending) force()
  return pending.length
}

/**
 * Fastify's own response serializer factory (fast-json-stringify, as Fastify builds it by default),
 * keeping each route's serializer for the process by its schema object. The response schemas are
 * module constants, so a second app in the same process (a worker beside the server, every test)
 * compiles nothing again: compiling them was a tenth of an app's build. Each is compiled when its
 * route first answers with that status, not at boot. Only when the app has no
 * shared schemas and no serializer options, which would make the same schema serialize otherwise.
 */
export const buildSerializer: Factory = (externalSchemas, options) => {
  const compile = build(externalSchemas, options)
  const plain = Object.keys(externalSchemas ?? {}).length === 0 && Object.keys(options ?? {}).length === 0
  if (!plain) return compile
  return (route) => {
    const schema = route.schema
    if (typeof schema !== 'object' || schema === null) return compile(route)
    let serializer = compiled.get(schema)
    if (serializer === undefined) {
      // compiled when the route first answers, not at boot (most processes answer few routes)
      let built: Serializer | undefined
      const force = (): Serializer => {
        if (built === undefined) {
          built = compile(route)
          uncompiled.delete(force)
        }
        return built
      }
      uncompiled.add(force)
      serializer = (data) => force()(data)
      compiled.set(schema, serializer)
    }
    return serializer
  }
}
