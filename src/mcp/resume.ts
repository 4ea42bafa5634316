import type { McpStoredEvent } from '../storage/mcp-sessions.js'
import type { McpSession, McpSessions } from './sessions.js'

/** How often a resumed stream reads the store without being woken (a lost notification costs this much latency, never an event). */
const POLL_MS = 2000

/** Whether a stored message ends its stream: the request's answer, or the mark of a request that ended without one. */
function ends (message: string): boolean {
  if (message === '') return true
  if (!message.startsWith('{"')) return false
  const parsed = JSON.parse(message) as { method?: unknown, id?: unknown, result?: unknown, error?: unknown }
  return parsed.method === undefined && parsed.id !== undefined && (parsed.result !== undefined || parsed.error !== undefined)
}

/** One stored event as the SDK's transport writes it (`event: message`, its id, its JSON; a priming event has no data). */
function frame (event: McpStoredEvent): string {
  return event.message === '{}' ? `id: ${event.id}\ndata: \n\n` : `event: message\nid: ${event.id}\ndata: ${event.message}\n\n`
}

/**
 * A stream of the session resumed after event `from` (`GET /mcp` with `Last-Event-ID`), on any
 * instance: the events stored since, then each new one as it is stored (woken by the store's
 * signal, read again every {@link POLL_MS}), until the request's answer (or the end of a request
 * cancelled), the session closing or `signal`. `unknown`: the session has no such event; `ended`:
 * nothing is left to send.
 */
export async function resumeStream (sessions: McpSessions, session: McpSession, from: string, options: { signal: AbortSignal, keepAliveMs: number }):
Promise<'unknown' | 'ended' | AsyncIterable<string>> {
  const first = await sessions.store.eventsFrom(session.id, from)
  if (first === undefined) return 'unknown'
  const [cursorEvent, ...pending] = first.events
  // nothing to send but the end: the answer was sent before, or the request ended without one
  if (cursorEvent === undefined || ([cursorEvent, ...pending].some((e) => ends(e.message)) && pending.every((e) => e.message === ''))) return 'ended'
  const { stream } = first
  async function * frames (): AsyncIterable<string> {
    let cursor = from
    let batch = pending
    let wake: (() => void) | undefined
    let woken = false
    let sent = Date.now()
    const rouse = (): void => { woken = true; wake?.() }
    const stopFollowing = sessions.follow(session.id, stream, rouse)
    const stopClosed = sessions.follow(session.id, 'closed', rouse)
    options.signal.addEventListener('abort', rouse, { once: true })
    try {
      for (;;) {
        for (const event of batch) {
          cursor = event.id
          if (event.message !== '') {
            sent = Date.now()
            yield frame(event)
          }
          if (ends(event.message)) return
        }
        if (options.signal.aborted) return
        if (!woken) {
          let timer: NodeJS.Timeout | undefined
          await new Promise<void>((resolve) => {
            wake = resolve
            timer = setTimeout(resolve, Math.min(POLL_MS, options.keepAliveMs))
          })
          clearTimeout(timer)
          wake = undefined
        }
        if (Date.now() - sent >= options.keepAliveMs) {
          sent = Date.now()
          yield ': keepalive\n\n'
        }
        woken = false
        if (options.signal.aborted) return
        const next = await sessions.store.eventsFrom(session.id, cursor)
        // the session closed (its events went with it)
        if (next === undefined) return
        batch = next.events.slice(1)
      }
    } finally {
      stopFollowing()
      stopClosed()
      options.signal.removeEventListener('abort', rouse)
    }
  }
  return frames()
}
