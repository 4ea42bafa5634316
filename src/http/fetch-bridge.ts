import type { IncomingHttpHeaders, ServerResponse } from 'node:http'

/**
 * A Fetch `Request` with the method, URL and headers of a Node.js request, for a handler written
 * against web standards (the MCP SDK's transport). No body: the route has parsed it already and
 * hands it over beside the request.
 */
export function webRequestOf (method: string, url: string, headers: IncomingHttpHeaders): Request {
  const web = new Headers()
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue
    if (Array.isArray(value)) for (const one of value) web.append(name, one)
    else web.set(name, value)
  }
  return new Request(new URL(url, 'http://localhost'), { method, headers: web })
}

/**
 * Send a Fetch `Response` on a Node.js response: its status and headers (after `extra`, the
 * headers the route's hooks set), then its body as it comes, waiting for `drain` when the socket
 * is behind. The client going away cancels the body (a stream's producer is told).
 */
export async function sendResponse (raw: ServerResponse, response: Response, extra: Record<string, number | string | string[]> = {}): Promise<void> {
  const headers: Record<string, number | string | string[]> = { ...extra }
  response.headers.forEach((value, name) => { headers[name] = value })
  raw.writeHead(response.status, headers)
  // a stream's headers go at once, before its first event
  raw.flushHeaders()
  if (response.body === null) {
    raw.end()
    return
  }
  const reader = response.body.getReader()
  let closed = false
  let resume: (() => void) | undefined
  const onClose = (): void => {
    closed = true
    resume?.()
    reader.cancel().catch(() => {})
  }
  raw.on('close', onClose)
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done || closed) break
      if (!raw.write(value)) {
        await new Promise<void>((resolve) => {
          resume = resolve
          raw.once('drain', resolve)
        })
        resume = undefined
      }
    }
  } catch {
    // the body failed or was cancelled: the response ends where it is
  } finally {
    raw.off('close', onClose)
    if (!raw.writableEnded) raw.end()
  }
}
