import { request, type IncomingMessage, type ClientRequest } from 'node:http'
import { createServer } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * A port of 127.0.0.1 that nothing listens on: one the system just gave out and took back. For a
 * server started as a process on a port given in advance, or an address that must refuse connections.
 */
export async function freePort (): Promise<number> {
  return await new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => { resolve(port) })
    })
  })
}

/** A response read from a real socket as it arrives. */
export interface Open {
  req: ClientRequest
  res: IncomingMessage
  text: () => string
  bytes: () => number
  ended: Promise<void>
}

/** POST an envelope over a real socket and collect the response as it arrives. */
export async function open (url: string, body: unknown, accept = 'text/event-stream', headers: Record<string, string> = {}): Promise<Open> {
  const payload = JSON.stringify(body)
  return await new Promise((resolve, reject) => {
    const req = request(`${url}/v1/assist`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept, 'content-length': Buffer.byteLength(payload), ...headers }
    }, (res) => {
      const chunks: Buffer[] = []
      let size = 0
      res.on('data', (c: Buffer) => { chunks.push(c); size += c.length })
      const ended = new Promise<void>((resolve) => { res.on('end', resolve); res.on('close', resolve) })
      resolve({ req, res, text: () => Buffer.concat(chunks).toString('utf8'), bytes: () => size, ended })
    })
    req.on('error', reject)
    req.end(payload)
  })
}

/** Poll `check` every `every` ms until it holds; throw after `ms`. */
export async function until (what: string, check: () => boolean | Promise<boolean>, ms = 5000, every = 2): Promise<void> {
  const deadline = Date.now() + ms
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(every)
  }
}
