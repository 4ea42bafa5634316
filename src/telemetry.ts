import { diag, DiagLogLevel, type DiagLogFunction } from '@opentelemetry/api'
import type { NodeTracerProvider } from '@opentelemetry/sdk-trace-node'
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions'
import pkg from '../package.json' with { type: 'json' }

/** The trace exporters this server can make, by their `OTEL_TRACES_EXPORTER` names. */
export type TraceExporterName = 'otlp' | 'console'

/** Where telemetry says what it cannot do (pino's shape: object first). */
export interface TelemetryLog {
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

/** Telemetry that was started: the provider to give `buildApp`, and how to stop it. */
export interface Telemetry {
  readonly provider: NodeTracerProvider
  /** The exporters spans go to. */
  readonly exporters: TraceExporterName[]
  /** Export what is still buffered, then stop (after the app has closed: its last spans are in the buffer). */
  shutdown(): Promise<void>
}

/** One standard OpenTelemetry variable as this server honours it. */
export interface OtelSetting {
  name: string
  /** As the reference shows it: `''` for none. */
  default: string
  /** What it does here, for users (docs/reference/configuration.md). */
  description: string
}

/**
 * The `OTEL_*` variables that shape this server's traces. They are not settings of `ConfigSchema`:
 * {@link traceExporters} reads a few, the SDK and the exporter read the rest from `process.env`
 * themselves, and none of them stops the boot when it is wrong.
 */
export const OTEL_SETTINGS: readonly OtelSetting[] = [
  { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', default: '', description: 'a collector\'s OTLP/HTTP address (`/v1/traces` is added); setting it turns trace export on' },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', default: '', description: 'the same for traces only, the whole URL; it also turns export on' },
  { name: 'OTEL_TRACES_EXPORTER', default: '', description: '`otlp`, `console` (spans on stdout), both (comma-separated), or `none` (off, whatever the endpoint)' },
  { name: 'OTEL_SDK_DISABLED', default: 'false', description: '`true`: no telemetry, whatever else is set' },
  { name: 'OTEL_SERVICE_NAME', default: 'agent-host', description: 'the spans\' `service.name`; `OTEL_RESOURCE_ATTRIBUTES` adds more (`deployment.environment.name=prod`)' },
  { name: 'OTEL_EXPORTER_OTLP_HEADERS', default: '', description: 'headers of every export (`authorization=Bearer ...`); `OTEL_EXPORTER_OTLP_TIMEOUT` (`10000` ms) and `OTEL_EXPORTER_OTLP_COMPRESSION` (`gzip` or `none`) too, and each has a `_TRACES_` form' },
  { name: 'OTEL_EXPORTER_OTLP_PROTOCOL', default: 'http/protobuf', description: 'the only protocol here: another (here or in `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`) is warned about at boot and not used' },
  { name: 'OTEL_TRACES_SAMPLER', default: 'parentbased_always_on', description: '`always_on`, `always_off`, `traceidratio`, `parentbased_always_off`, `parentbased_traceidratio`; `OTEL_TRACES_SAMPLER_ARG` is the ratio. A caller\'s unsampled `traceparent` (flags `00`) records nothing under the default' },
  { name: 'OTEL_BSP_SCHEDULE_DELAY', default: '5000', description: 'ms between batch exports; `OTEL_BSP_MAX_QUEUE_SIZE` (`2048`), `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (`512`) and `OTEL_BSP_EXPORT_TIMEOUT` (`30000` ms) too' }
]

/** Variables' values as the OpenTelemetry specification reads them: trimmed, case-insensitive. */
function read (env: Record<string, string | undefined>, name: string): string {
  return (env[name] ?? '').trim().toLowerCase()
}

/**
 * Which exporters the standard variables ask for, and what in them this server cannot honour.
 * Off by default: traces are exported when `OTEL_TRACES_EXPORTER` names `otlp` or `console`, or,
 * without it, when an OTLP endpoint is set; `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`
 * turns them off.
 */
export function traceExporters (env: Record<string, string | undefined>): { exporters: TraceExporterName[], warnings: string[] } {
  if (read(env, 'OTEL_SDK_DISABLED') === 'true') return { exporters: [], warnings: [] }
  const warnings: string[] = []
  const listed = read(env, 'OTEL_TRACES_EXPORTER').split(',').map((name) => name.trim()).filter((name) => name !== '')
  let exporters: TraceExporterName[]
  if (listed.length > 0) {
    if (listed.includes('none')) return { exporters: [], warnings: [] }
    exporters = [...new Set(listed.filter((name): name is TraceExporterName => name === 'otlp' || name === 'console'))]
    const unknown = listed.filter((name) => name !== 'otlp' && name !== 'console')
    if (unknown.length > 0) warnings.push(`OTEL_TRACES_EXPORTER: ${unknown.join(', ')} is not supported here (only otlp and console); ignored`)
  } else {
    exporters = read(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') !== '' || read(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') !== '' ? ['otlp'] : []
  }
  const protocol = read(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') || read(env, 'OTEL_EXPORTER_OTLP_PROTOCOL')
  if (exporters.includes('otlp') && protocol !== '' && protocol !== 'http/protobuf') {
    warnings.push(`OTEL_EXPORTER_OTLP_PROTOCOL: ${protocol} is not supported here; traces are sent as http/protobuf`)
  }
  return { exporters, warnings }
}

/**
 * Start exporting traces if the standard `OTEL_*` variables in `env` ask for it (see
 * {@link traceExporters}); undefined when they do not. Everything else — the endpoint, headers,
 * timeout and compression of the exporter, the sampler (`OTEL_TRACES_SAMPLER`), the batch
 * processor's delays and sizes (`OTEL_BSP_*`), the resource (`OTEL_SERVICE_NAME`, default
 * `agent-host`, and `OTEL_RESOURCE_ATTRIBUTES`) — the SDK and the exporter read from
 * `process.env` themselves, as the specification says (`server.ts` passes `process.env` as `env`).
 *
 * Spans are batched and sent as OTLP over HTTP/protobuf. The provider is not registered
 * globally: `buildApp` takes it. The SDK's own complaints (an export that failed) go to `log`.
 * The SDK's modules are loaded only then: a server that exports no traces starts without them.
 */
export async function startTelemetry (env: Record<string, string | undefined>, log: TelemetryLog): Promise<Telemetry | undefined> {
  const { exporters, warnings } = traceExporters(env)
  for (const warning of warnings) log.warn({}, warning)
  if (exporters.length === 0) return undefined
  const [{ OTLPTraceExporter }, { defaultResource, detectResources, envDetector, resourceFromAttributes }, { BatchSpanProcessor, ConsoleSpanExporter, NodeTracerProvider }] = await Promise.all([
    import('@opentelemetry/exporter-trace-otlp-proto'), import('@opentelemetry/resources'), import('@opentelemetry/sdk-trace-node')
  ])
  const say = (write: (obj: object, msg: string) => void): DiagLogFunction => (message, ...args) => {
    write(args.length > 0 ? { details: args.map(String) } : {}, `OpenTelemetry: ${message}`)
  }
  const quiet: DiagLogFunction = () => {}
  diag.setLogger({ error: say(log.error.bind(log)), warn: say(log.warn.bind(log)), info: quiet, debug: quiet, verbose: quiet }, DiagLogLevel.WARN)
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'agent-host', [ATTR_SERVICE_VERSION]: pkg.version }))
    .merge(detectResources({ detectors: [envDetector] }))
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: exporters.map((name) => new BatchSpanProcessor(name === 'otlp' ? new OTLPTraceExporter() : new ConsoleSpanExporter()))
  })
  return {
    provider,
    exporters,
    shutdown: async () => {
      try {
        await provider.shutdown()
      } finally {
        diag.disable()
      }
    }
  }
}
