import t from 'tap'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { Static } from 'typebox'
import type * as C from '../../client/src/protocol.js'
import { SSE_EVENT_NAME } from '../../client/src/protocol.js'
import { emitProtocol } from '../../client/scripts/protocol-emitter.js'
import { generateProtocol, PROTOCOL_FILE } from '../../client/scripts/protocol-sources.js'
import type * as common from '../../src/protocol/common.js'
import type * as envelope from '../../src/protocol/envelope.js'
import type * as interrupts from '../../src/protocol/interrupts.js'
import type * as manifest from '../../src/protocol/manifest.js'
import type * as packets from '../../src/protocol/packets.js'
import { SSE_EVENT_NAME as SERVER_SSE_EVENT_NAME } from '../../src/protocol/packets.js'
import type * as response from '../../src/protocol/response.js'
import * as fixture from './fixtures/emitter-source.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false

/** Each generated type next to the server's own `Static<>` type of the schema it came from. */
interface Pairs {
  Uuid: [C.Uuid, Static<typeof common.Uuid>]
  DateTime: [C.DateTime, Static<typeof common.DateTime>]
  JsonObject: [C.JsonObject, Static<typeof common.JsonObject>]
  JsonSchema: [C.JsonSchema, Static<typeof common.JsonSchema>]
  UserContext: [C.UserContext, Static<typeof envelope.UserContext>]
  TraceContext: [C.TraceContext, Static<typeof envelope.TraceContext>]
  SessionContext: [C.SessionContext, Static<typeof envelope.SessionContext>]
  ClientCapabilities: [C.ClientCapabilities, Static<typeof envelope.ClientCapabilities>]
  RequestMetadata: [C.RequestMetadata, Static<typeof envelope.RequestMetadata>]
  AgentRequest: [C.AgentRequest, Static<typeof envelope.AgentRequest>]
  ServiceRequest: [C.ServiceRequest, Static<typeof envelope.ServiceRequest>]
  Interrupt: [C.Interrupt, Static<typeof interrupts.Interrupt>]
  InterruptEvent: [C.InterruptEvent, Static<typeof interrupts.InterruptEvent>]
  ApprovalValue: [C.ApprovalValue, Static<typeof interrupts.ApprovalValue>]
  ResumeAnswer: [C.ResumeAnswer, Static<typeof interrupts.ResumeAnswer>]
  StreamErrorSeverity: [C.StreamErrorSeverity, Static<typeof packets.StreamErrorSeverity>]
  StreamError: [C.StreamError, Static<typeof packets.StreamError>]
  CloseReason: [C.CloseReason, Static<typeof packets.CloseReason>]
  ThoughtTraceEvent: [C.ThoughtTraceEvent, Static<typeof packets.ThoughtTraceEvent>]
  MarkdownBlockEvent: [C.MarkdownBlockEvent, Static<typeof packets.MarkdownBlockEvent>]
  Citation: [C.Citation, Static<typeof packets.Citation>]
  CitationBlockEvent: [C.CitationBlockEvent, Static<typeof packets.CitationBlockEvent>]
  ProgressIndicatorEvent: [C.ProgressIndicatorEvent, Static<typeof packets.ProgressIndicatorEvent>]
  MediaItem: [C.MediaItem, Static<typeof packets.MediaItem>]
  MediaCarouselEvent: [C.MediaCarouselEvent, Static<typeof packets.MediaCarouselEvent>]
  PresentationEvent: [C.PresentationEvent, Static<typeof packets.PresentationEvent>]
  DataEvent: [C.DataEvent, Static<typeof packets.DataEvent>]
  ResultEvent: [C.ResultEvent, Static<typeof packets.ResultEvent>]
  StreamStartEvent: [C.StreamStartEvent, Static<typeof packets.StreamStartEvent>]
  UsageEvent: [C.UsageEvent, Static<typeof packets.UsageEvent>]
  EventPayload: [C.EventPayload, Static<typeof packets.EventPayload>]
  DeltaPacket: [C.DeltaPacket, Static<typeof packets.DeltaPacket>]
  EventPacket: [C.EventPacket, Static<typeof packets.EventPacket>]
  ErrorPacket: [C.ErrorPacket, Static<typeof packets.ErrorPacket>]
  ClosePacket: [C.ClosePacket, Static<typeof packets.ClosePacket>]
  StreamPacket: [C.StreamPacket, Static<typeof packets.StreamPacket>]
  TranscriptStream: [C.TranscriptStream, Static<typeof response.TranscriptStream>]
  Transcript: [C.Transcript, Static<typeof response.Transcript>]
  Usage: [C.Usage, Static<typeof response.Usage>]
  ResponseMetrics: [C.ResponseMetrics, Static<typeof response.ResponseMetrics>]
  ServiceResponse: [C.ServiceResponse, Static<typeof response.ServiceResponse>]
  ErrorBody: [C.ErrorBody, Static<typeof response.ErrorBody>]
  SemVer: [C.SemVer, Static<typeof manifest.SemVer>]
  DeliveryMode: [C.DeliveryMode, Static<typeof manifest.DeliveryMode>]
  AgentMetadata: [C.AgentMetadata, Static<typeof manifest.AgentMetadata>]
  EventSchema: [C.EventSchema, Static<typeof manifest.EventSchema>]
  AgentCapability: [C.AgentCapability, Static<typeof manifest.AgentCapability>]
  ModelConfig: [C.ModelConfig, Static<typeof manifest.ModelConfig>]
  AgentRuntimeConfig: [C.AgentRuntimeConfig, Static<typeof manifest.AgentRuntimeConfig>]
  AgentDependencies: [C.AgentDependencies, Static<typeof manifest.AgentDependencies>]
  PolicyConfig: [C.PolicyConfig, Static<typeof manifest.PolicyConfig>]
  ObservabilityConfig: [C.ObservabilityConfig, Static<typeof manifest.ObservabilityConfig>]
  AgentDefinition: [C.AgentDefinition, Static<typeof manifest.AgentDefinition>]
  AgentList: [C.AgentList, Static<typeof manifest.AgentList>]
}

// `npm run typecheck` fails here when a generated type is not exactly the server's type.
const identical: { [K in keyof Pairs]: Equal<Pairs[K][0], Pairs[K][1]> } = {
  Uuid: true,
  DateTime: true,
  JsonObject: true,
  JsonSchema: true,
  UserContext: true,
  TraceContext: true,
  SessionContext: true,
  ClientCapabilities: true,
  RequestMetadata: true,
  AgentRequest: true,
  ServiceRequest: true,
  Interrupt: true,
  InterruptEvent: true,
  ApprovalValue: true,
  ResumeAnswer: true,
  StreamErrorSeverity: true,
  StreamError: true,
  CloseReason: true,
  ThoughtTraceEvent: true,
  MarkdownBlockEvent: true,
  Citation: true,
  CitationBlockEvent: true,
  ProgressIndicatorEvent: true,
  MediaItem: true,
  MediaCarouselEvent: true,
  PresentationEvent: true,
  DataEvent: true,
  ResultEvent: true,
  StreamStartEvent: true,
  UsageEvent: true,
  EventPayload: true,
  DeltaPacket: true,
  EventPacket: true,
  ErrorPacket: true,
  ClosePacket: true,
  StreamPacket: true,
  TranscriptStream: true,
  Transcript: true,
  Usage: true,
  ResponseMetrics: true,
  ServiceResponse: true,
  ErrorBody: true,
  SemVer: true,
  DeliveryMode: true,
  AgentMetadata: true,
  EventSchema: true,
  AgentCapability: true,
  ModelConfig: true,
  AgentRuntimeConfig: true,
  AgentDependencies: true,
  PolicyConfig: true,
  ObservabilityConfig: true,
  AgentDefinition: true,
  AgentList: true
}

t.test('client/src/protocol.ts is exactly what the server\'s schemas generate (regenerate: see its header)', async (t) => {
  t.equal(readFileSync(PROTOCOL_FILE, 'utf8'), generateProtocol())
})

t.test('every generated type is checked against the server\'s Static type, and the constants match', async (t) => {
  const generated = readFileSync(PROTOCOL_FILE, 'utf8')
  const declared = [...generated.matchAll(/^export (?:interface|type) (\w+)/gm)].map((m) => m[1])
  t.same(declared.sort(), Object.keys(identical).sort(), 'the type-level table above lists every generated type')
  t.equal(SSE_EVENT_NAME, SERVER_SSE_EVENT_NAME)
})

t.test('the emitter: every schema shape, doc comments through spreads, wrappers and helpers; refusals name the path', async (t) => {
  const file = fileURLToPath(new URL('./fixtures/emitter-source.ts', import.meta.url))
  const emit = (roots: string[]): string => emitProtocol({ modules: [{ file, exports: fixture }], roots, header: ['h', ''] })
  t.equal(emit(['NAME', 'Everything']), readFileSync(new URL('./fixtures/emitter-output.txt', import.meta.url), 'utf8'))
  t.equal(emit(['EmailAgain']), '// h\n//\n\n/** `EmailAgain` of the server\'s wire schemas. */\nexport type EmailAgain = string\n', 'an export without a doc comment gets one')
  t.throws(() => emit(['Missing']), /Missing: no such export/)
  t.throws(() => emit(['list']), /list: not a schema or a string constant/)
  t.throws(() => emit(['MinProperties']), /MinProperties: unsupported keyword minProperties/)
  t.throws(() => emit(['NullConst']), /NullConst: unsupported const null/)
  t.throws(() => emit(['TwoPatterns']), /TwoPatterns: more than one patternProperties/)
  t.throws(() => emit(['NoType']), /NoType: unsupported type "function"/)
})
