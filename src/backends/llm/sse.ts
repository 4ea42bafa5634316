import { takeLines, type ParseResult, type ParseState } from '../protocol.js'

/**
 * Parse a provider's Server-Sent Events stream (OpenAI chat completions, Anthropic messages):
 * each event whose `data` is JSON becomes `{ type: 'message', message: { event?, data } }`;
 * `data: [DONE]` (OpenAI) and `event: message_stop` (Anthropic) are `eof`. Comments, `id:` and
 * `retry:` lines are skipped. Bytes split anywhere are carried in `state`.
 */
export function parseSse (chunk: Uint8Array | string | null, state: ParseState): ParseResult[] {
  const results: ParseResult[] = []
  const lines = takeLines(chunk, state)
  if (chunk === null) lines.push('')
  for (const line of lines) {
    if (line === '') {
      if (state.data.length > 0) results.push(dispatch(state.event, state.data.join('\n')))
      state.event = ''
      state.data = []
      continue
    }
    if (line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'data') state.data.push(value)
    else if (field === 'event') state.event = value
  }
  if (results.length === 0 && chunk !== null) results.push({ type: 'partial' })
  return results
}

function dispatch (event: string, data: string): ParseResult {
  if (data === '[DONE]' || event === 'message_stop') return { type: 'eof' }
  try {
    const parsed: unknown = JSON.parse(data)
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not a JSON object')
    return { type: 'message', message: event === '' ? { data: parsed } : { event, data: parsed } }
  } catch (err) {
    return { type: 'error', error: new Error(`unparsable event data ${JSON.stringify(data.slice(0, 200))}: ${(err as Error).message}`) }
  }
}
