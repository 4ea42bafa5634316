import { fileURLToPath } from 'node:url'
import * as common from '../../src/protocol/common.js'
import * as envelope from '../../src/protocol/envelope.js'
import * as interrupts from '../../src/protocol/interrupts.js'
import * as manifest from '../../src/protocol/manifest.js'
import * as packets from '../../src/protocol/packets.js'
import * as response from '../../src/protocol/response.js'
import { emitProtocol, type ProtocolModule } from './protocol-emitter.js'

const source = (name: string, exports: Record<string, unknown>): ProtocolModule =>
  ({ file: fileURLToPath(new URL(`../../src/protocol/${name}.ts`, import.meta.url)), exports })

/** Where the generated file lives. */
export const PROTOCOL_FILE = fileURLToPath(new URL('../src/protocol.ts', import.meta.url))

/** The server's wire schemas the client's types come from, in the order they are emitted. */
export const PROTOCOL_MODULES: readonly ProtocolModule[] = [
  source('common', common), source('envelope', envelope), source('interrupts', interrupts), source('packets', packets), source('response', response), source('manifest', manifest)
]

/** What the client needs: the envelope, the packets, the answers and the manifests (and all they use). */
export const PROTOCOL_ROOTS: readonly string[] = ['ServiceRequest', 'StreamPacket', 'SSE_EVENT_NAME', 'ServiceResponse', 'Transcript', 'ErrorBody', 'AgentDefinition', 'AgentList', 'ApprovalValue', 'ResumeAnswer']

/** `client/src/protocol.ts` as the server's current schemas make it. */
export function generateProtocol (): string {
  return emitProtocol({
    modules: PROTOCOL_MODULES,
    roots: PROTOCOL_ROOTS,
    header: [
      'GENERATED FILE: do not edit. The wire types of CAP (../../shared/spec/CAP.md), made by',
      'client/scripts/generate-types.ts from the server\'s TypeBox schemas in src/protocol/ (common.ts,',
      'envelope.ts, interrupts.ts, packets.ts, response.ts, manifest.ts), so they cannot drift from what the server',
      'validates and sends. After changing a schema, regenerate from the repository root with',
      '',
      '  TS_NODE_TRANSPILE_ONLY=1 node --import @tapjs/typescript/import client/scripts/generate-types.ts',
      '',
      'test/client/protocol.test.ts fails while this file differs from what the schemas generate.'
    ]
  })
}
