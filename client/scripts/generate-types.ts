import { writeFileSync } from 'node:fs'
import { generateProtocol, PROTOCOL_FILE } from './protocol-sources.js'

// Writes client/src/protocol.ts from the server's schemas (see the header of that file).
writeFileSync(PROTOCOL_FILE, generateProtocol())
console.log(`wrote ${PROTOCOL_FILE}`)
