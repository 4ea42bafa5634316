import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai'

/** The AI SDK's own transport for agent `agent` of the server at `url` (`api` = `/ai-sdk/{agent}/chat`), sending `key` as a bearer token. */
export function transport (url: string, agent: string, options: { key?: string, body?: Record<string, unknown>, fetch?: typeof fetch } = {}): DefaultChatTransport<UIMessage> {
  return new DefaultChatTransport<UIMessage>({
    api: `${url}/ai-sdk/${agent}/chat`,
    ...(options.key !== undefined ? { headers: { authorization: `Bearer ${options.key}` } } : {}),
    ...(options.body !== undefined ? { body: options.body } : {}),
    ...(options.fetch !== undefined ? { fetch: options.fetch } : {})
  })
}

/** A user message with one text part. */
export function userMessage (text: string, id = `u-${Math.random().toString(36).slice(2)}`): UIMessage {
  return { id, role: 'user', parts: [{ type: 'text', text }] }
}

/** Every chunk of a UI message stream, read to its end, and the message the AI SDK's `readUIMessageStream` assembles from them. */
export async function readAll (stream: ReadableStream<UIMessageChunk>): Promise<{ chunks: UIMessageChunk[], message: UIMessage | undefined }> {
  const [forChunks, forMessage] = stream.tee()
  const chunks: UIMessageChunk[] = []
  const reading = (async () => { for await (const chunk of forChunks as unknown as AsyncIterable<UIMessageChunk>) chunks.push(chunk) })()
  let message: UIMessage | undefined
  for await (const snapshot of readUIMessageStream({ stream: forMessage, terminateOnError: true })) message = snapshot
  await reading
  return { chunks, message }
}

/** The text of a message's text parts, in order. */
export function textOf (message: UIMessage | undefined): string {
  return (message?.parts ?? []).flatMap((part) => part.type === 'text' ? [part.text] : []).join('')
}

/**
 * The chat `useChat` runs (`@ai-sdk/react`'s `Chat`: the AI SDK's `AbstractChat` over React's state
 * holder; `useChat` makes one and renders its `messages` and `status`), driven without a page: what
 * a `useChat` user sees.
 */
export { Chat as TestChat } from '@ai-sdk/react'

/**
 * A fetch whose next answer's body can be cut as a dropped connection is: {@link drop} errors the
 * body the client reads with a network `TypeError` (what `fetch` throws when a connection breaks)
 * and closes the real connection.
 */
export function droppableFetch (): { fetch: typeof fetch, drop: () => void } {
  let dropNow: (() => void) | undefined
  const droppable: typeof fetch = async (input, init) => {
    const response = await fetch(input, init)
    if (response.body === null || init?.method !== 'POST' || dropNow !== undefined) return response
    const reader = response.body.getReader()
    const body = new ReadableStream<Uint8Array>({
      start (controller) {
        dropNow = () => {
          controller.error(new TypeError('fetch failed: network connection lost'))
          reader.cancel().catch(() => {})
        }
      },
      async pull (controller) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }))
        try {
          if (done === true) controller.close()
          else controller.enqueue(value)
        } catch {
          // dropped meanwhile: the body is errored already
        }
      }
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }
  return { fetch: droppable, drop: () => { dropNow?.() } }
}
