// The playground's chat page (/playground/chat): the AI SDK's own `useChat` (@ai-sdk/react) and
// `DefaultChatTransport` against this server's AI SDK binding, /ai-sdk/<agent>/chat (docs/ai-sdk.md),
// so what it shows is what a React front end built on the AI SDK gets. React and the AI SDK cannot be
// served file by file, so `npm run build` bundles this file (scripts/build.ts:bundleChatPage) into
// dist/playground/chat.js, which the playground route serves under the same Content-Security-Policy
// as the rest of the playground. The chat (its id, agent, arguments and messages) is kept for
// this tab in sessionStorage: a reload in the middle of an answer resumes it (`resume: true`). Text
// is markdown, rendered with marked and sanitised with DOMPurify before it touches the page.
import './csp.js'
import { useEffect, useMemo, useRef, useState } from 'react'
import { createRoot } from 'react-dom/client'
import { useChat } from '@ai-sdk/react'
import { DefaultChatTransport } from 'ai'
import DOMPurify from 'dompurify'
import { marked } from 'marked'

/** The main playground's key: one API key for both pages of this tab. */
const KEY_KEY = 'agent-host.playground.apiKey'
const CHAT_KEY = 'agent-host.playground.chat'

function loadSaved () {
  try {
    return JSON.parse(sessionStorage.getItem(CHAT_KEY) ?? 'null') ?? {}
  } catch {
    return {}
  }
}

function authHeaders () {
  const key = sessionStorage.getItem(KEY_KEY) ?? ''
  return key === '' ? {} : { authorization: `Bearer ${key}` }
}

/** The message of a failed request or an `error` chunk: an HTTP error's body is the server's `{ code, message }`. */
function describe (error) {
  try {
    const body = JSON.parse(error.message)
    if (typeof body?.code === 'string') return `${body.code}: ${body.message ?? ''}`
  } catch {}
  return error.message
}

/** Only http(s) links are followed: a citation is the agent's text, not to be trusted as a `javascript:` URL. */
function safeUrl (url) {
  try {
    const parsed = new URL(url, location.href)
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed.href : undefined
  } catch {
    return undefined
  }
}

const isTool = (part) => part.type.startsWith('tool-') || part.type === 'dynamic-tool'
const SETTLED = new Set(['output-available', 'output-error', 'output-denied', 'approval-responded'])

/**
 * `sendAutomaticallyWhen`: the last assistant message's last step asked questions (tool parts) and
 * the person has answered every one of them. The answers' run settles them before its own step, so
 * a finished answer run is never sent again.
 */
function allAnswered ({ messages }) {
  const tools = lastStep(messages.at(-1))
  return tools.length > 0 && tools.every((part) => SETTLED.has(part.state))
}

/** The tool parts of an assistant message's last step (none for another message). */
function lastStep (message) {
  if (message?.role !== 'assistant') return []
  const stepStart = message.parts.findLastIndex((part) => part.type === 'step-start')
  return message.parts.slice(stepStart + 1).filter(isTool)
}

const NONE = new Set()

/** A text part: markdown, sanitised; a CAP stream's title above it. */
function Text ({ part }) {
  const html = useMemo(() => DOMPurify.sanitize(marked.parse(part.text, { async: false })), [part.text])
  const title = part.providerMetadata?.agentHost?.title
  return (
    <div className='text' data-state={part.state}>
      {title !== undefined && <h3>{title}</h3>}
      <div className='markdown' dangerouslySetInnerHTML={{ __html: html }} />
    </div>
  )
}

function Json ({ value }) {
  return <pre>{JSON.stringify(value, null, 2)}</pre>
}

/** A data part (`data-result`, `data-data`, ...): its name, and its JSON folded. */
function DataPart ({ part }) {
  const name = part.type.slice('data-'.length)
  if (name === 'progress-indicator') {
    const { label, status, progress_percent: done } = part.data
    return (
      <p className='progress' data-part={part.type} data-status={status}>
        {label} <progress value={status === 'complete' ? 1 : done} max={1} aria-label={label} /> <small>{String(status).toLowerCase()}</small>
      </p>
    )
  }
  const title = part.data?.title ?? name
  return (
    <details className={`data ${name}`} data-part={part.type} open={name === 'result' || name === 'error'}>
      <summary>{title}</summary>
      <Json value={part.data} />
    </details>
  )
}

/** A field of an input question's form, from one property of its schema. */
function Field ({ name, schema, required }) {
  const label = `${name}${required ? ' *' : ''}`
  if (Array.isArray(schema.enum)) {
    return (
      <label>{label}
        <select name={name} required={required}>
          {schema.enum.map((value) => <option key={JSON.stringify(value)} value={JSON.stringify(value)}>{String(value)}</option>)}
        </select>
      </label>
    )
  }
  if (schema.type === 'boolean') return <label>{label} <input type='checkbox' name={name} /></label>
  const number = schema.type === 'number' || schema.type === 'integer'
  return <label>{label}<input type={number ? 'number' : 'text'} name={name} required={required} step={schema.type === 'integer' ? 1 : 'any'} /></label>
}

/** The properties of a schema simple enough for a form (else the answer is typed as JSON). */
function formFields (schema) {
  if (schema?.type !== 'object' || typeof schema.properties !== 'object') return undefined
  const entries = Object.entries(schema.properties)
  const simple = (s) => Array.isArray(s.enum) || ['string', 'number', 'integer', 'boolean'].includes(s.type)
  return entries.length > 0 && entries.every(([, s]) => simple(s)) ? entries : undefined
}

function valueOf (form, fields) {
  const value = {}
  for (const [name, schema] of fields) {
    const el = form.elements.namedItem(name)
    if (Array.isArray(schema.enum)) value[name] = JSON.parse(el.value)
    else if (schema.type === 'boolean') value[name] = el.checked
    else if (el.value === '') continue
    else value[name] = schema.type === 'string' ? el.value : Number(el.value)
  }
  return value
}

/**
 * An agent's question (a tool part: the tool `approval` or `input`), answered in place. `refused`:
 * its answer was sent and refused (a 400: not what the schema asks), so it is asked again.
 */
function Question ({ part, answer, refused }) {
  const [problem, setProblem] = useState()
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length)
  const input = part.input ?? {}
  const open = part.state === 'approval-requested' || (name === 'input' && (part.state === 'input-available' || refused))
  const fields = formFields(input.schema)
  const first = useRef(null)
  useEffect(() => { if (open) first.current?.querySelector('input, select, textarea')?.focus() }, [open])

  const respond = (approved) => (event) => {
    const reason = event.currentTarget.form.elements.namedItem('comment').value.trim()
    answer.approve({ id: part.approval.id, approved, ...(reason !== '' ? { reason } : {}) })
  }
  const submit = (event) => {
    event.preventDefault()
    let output
    try {
      output = fields !== undefined ? valueOf(event.currentTarget, fields) : JSON.parse(event.currentTarget.elements.namedItem('json').value)
    } catch (err) {
      setProblem(`The answer is not JSON: ${err.message}`)
      return
    }
    setProblem(undefined)
    answer.input({ tool: name, toolCallId: part.toolCallId, output })
  }

  let outcome
  if (open) outcome = undefined
  else if (part.state === 'approval-responded') outcome = part.approval.approved ? 'Approved' : 'Rejected'
  else if (part.state === 'output-denied') outcome = 'Rejected'
  else if (part.state === 'output-available') outcome = name === 'approval' ? (part.output?.approved === false ? 'Rejected' : 'Approved') : 'Answered'
  else if (part.state === 'output-error') outcome = `Failed: ${part.errorText}`

  return (
    <section className={`question ${name}`} data-state={part.state} aria-label={`Question: ${input.message ?? name}`}>
      <p className='message'>{input.message ?? name}</p>
      {input.call !== undefined && <details><summary>The call to approve</summary><Json value={input.call} /></details>}
      {input.expires_at !== undefined && open && <p className='hint'>Open until <time dateTime={input.expires_at}>{new Date(input.expires_at).toLocaleString()}</time></p>}
      {open && part.state === 'approval-requested' && (
        <form ref={first} onSubmit={(event) => event.preventDefault()}>
          <label>Comment (optional)<input name='comment' /></label>
          <div className='actions'>
            <button type='button' onClick={respond(true)}>Approve</button>
            <button type='button' className='reject' onClick={respond(false)}>Reject</button>
          </div>
        </form>
      )}
      {open && part.state !== 'approval-requested' && (
        <form ref={first} onSubmit={submit}>
          {fields !== undefined
            ? fields.map(([field, schema]) => <Field key={field} name={field} schema={schema} required={input.schema.required?.includes(field) ?? false} />)
            : <label>Answer (JSON)<textarea name='json' rows={3} aria-invalid={problem !== undefined} /></label>}
          {input.schema !== undefined && <details><summary>Schema</summary><Json value={input.schema} /></details>}
          {refused && <p className='error'>The server refused this answer (below): answer again.</p>}
          <button type='submit'>Answer</button>
          {problem !== undefined && <p className='error' role='alert'>{problem}</p>}
        </form>
      )}
      {!open && name !== 'approval' && name !== 'input' && <Json value={{ input: part.input, output: part.output }} />}
      {outcome !== undefined && <p className='outcome'>{outcome}{part.state === 'output-available' && name === 'input' ? ': ' : ''}{part.state === 'output-available' && name === 'input' && <code>{JSON.stringify(part.output)}</code>}</p>}
    </section>
  )
}

function Part ({ part, answer, refused }) {
  switch (part.type) {
    case 'text':
      return <Text part={part} />
    case 'reasoning':
      return <details className='reasoning' open><summary>Thinking</summary><p>{part.text}</p></details>
    case 'file': {
      const url = part.url.startsWith('data:') ? part.url : safeUrl(part.url)
      if (url !== undefined && part.mediaType.startsWith('image/') && (url.startsWith('data:') || url.startsWith(location.origin))) return <img className='file' src={url} alt={part.providerMetadata?.agentHost?.alt_text ?? ''} />
      return <p className='file'><a href={safeUrl(part.url)} target='_blank' rel='noopener noreferrer'>{part.providerMetadata?.agentHost?.alt_text ?? part.filename ?? part.url}</a> <small>({part.mediaType})</small></p>
    }
    case 'source-url':
    case 'source-document':
    case 'step-start':
      return null
    default:
      if (part.type.startsWith('data-')) return <DataPart part={part} />
      if (isTool(part)) return <Question part={part} answer={answer} refused={refused.has(part.toolCallId)} />
      return <details className='unknown'><summary>{part.type}</summary><Json value={part} /></details>
  }
}

/** A message: its parts in order, then its sources as links. */
function Message ({ message, agent, answer, refused }) {
  const sources = message.parts.filter((part) => part.type === 'source-url' || part.type === 'source-document')
  const meta = message.metadata ?? {}
  return (
    <article className={`message ${message.role}`} data-role={message.role} data-request-id={meta.request_id} data-end-reason={meta.end_reason}>
      <h2>{message.role === 'user' ? 'You' : agent}{meta.end_reason !== undefined && meta.end_reason !== 'done' && <small className='end'> ({meta.end_reason.replace('_', ' ')})</small>}</h2>
      {message.parts.map((part, i) => <Part key={i} part={part} answer={answer} refused={refused} />)}
      {sources.length > 0 && (
        <>
          <h3 className='sources-title'>Sources</h3>
          <ol className='sources' aria-label='Sources'>
            {sources.map((source) => (
              <li key={source.sourceId}>
                {source.type === 'source-url' && safeUrl(source.url) !== undefined
                  ? <a href={safeUrl(source.url)} target='_blank' rel='noopener noreferrer'>{source.title ?? source.url}</a>
                  : <span>{source.title ?? source.url}</span>}
                {source.providerMetadata?.agentHost?.snippet !== undefined && <small> — {source.providerMetadata.agentHost.snippet}</small>}
              </li>
            ))}
          </ol>
        </>
      )}
      {meta.usage !== undefined && <p className='hint usage'>{meta.usage.input_tokens} tokens in, {meta.usage.output_tokens} out{meta.usage.cost !== undefined ? `, $${meta.usage.cost}` : ''}</p>}
    </article>
  )
}

/** One chat with one agent: `useChat` over the binding's transport; remounted for another chat. */
function Chat ({ agent, chatId, initialMessages, argsRef, argsInvalid, onMessages }) {
  const transport = useMemo(() => new DefaultChatTransport({
    api: `/ai-sdk/${encodeURIComponent(agent)}/chat`,
    headers: authHeaders,
    body: () => argsRef.current.value
  }), [agent, argsRef])
  const { messages, sendMessage, status, error, stop, clearError, addToolApprovalResponse, addToolOutput } = useChat({
    id: chatId,
    messages: initialMessages,
    transport,
    resume: true,
    sendAutomaticallyWhen: allAnswered,
    experimental_throttle: 50
  })
  const [text, setText] = useState('')
  const [stopProblem, setStopProblem] = useState()
  const busy = status === 'submitted' || status === 'streaming'

  // the answer in progress too: a reload resumes its run from the start, a replay that replaces the
  // message kept (the transport's `resumeStreamIsReplay`), and a run that ended meanwhile leaves it
  useEffect(() => { onMessages(messages) }, [messages, onMessages])
  // follow the answer as it grows, unless the reader scrolled up to read
  const end = useRef(null)
  useEffect(() => {
    if (innerHeight + scrollY >= document.documentElement.scrollHeight - 120) end.current?.scrollIntoView({ block: 'end' })
  }, [messages])

  const send = (event) => {
    event.preventDefault()
    if (argsInvalid || text.trim() === '' || busy) return
    sendMessage({ text })
    setText('')
  }
  const onStop = async () => {
    setStopProblem(undefined)
    try {
      const res = await fetch(`/ai-sdk/${encodeURIComponent(agent)}/chat/${encodeURIComponent(chatId)}/stop`, { method: 'POST', headers: authHeaders() })
      // 404: the run had ended already
      if (!res.ok && res.status !== 404) setStopProblem(describe(new Error(await res.text())))
    } catch (err) {
      setStopProblem(err.message)
    } finally {
      await stop()
    }
  }
  // a request that failed after the person answered: the answers of the last step were not taken
  const refused = useMemo(() => status === 'error' ? new Set(lastStep(messages.at(-1)).filter((part) => part.state === 'output-available').map((part) => part.toolCallId)) : NONE, [status, messages])
  const answer = {
    approve: (response) => { addToolApprovalResponse(response) },
    input: (output) => { addToolOutput(output) }
  }

  return (
    <>
      <div id='messages' role='log' aria-label='Messages'>
        {messages.length === 0 && <p className='hint'>Say something to {agent}.</p>}
        {messages.map((message, i) => <Message key={message.id} message={message} agent={agent} answer={answer} refused={i === messages.length - 1 ? refused : NONE} />)}
      </div>
      {error !== undefined && (
        <div className='error' role='alert' id='chat-error'>
          <span>{describe(error)}</span> <button type='button' className='link' onClick={clearError}>Dismiss</button>
        </div>
      )}
      {stopProblem !== undefined && <p className='error' role='alert'>Stop: {stopProblem}</p>}
      <form id='composer' onSubmit={send}>
        <label className='visually-hidden' htmlFor='message'>Message</label>
        <textarea
          id='message' rows={2} value={text} placeholder={`Message ${agent} (Enter sends, Shift+Enter a new line)`}
          onChange={(event) => setText(event.target.value)}
          onKeyDown={(event) => { if (event.key === 'Enter' && !event.shiftKey && !event.nativeEvent.isComposing) send(event) }}
        />
        <div className='actions'>
          <button type='submit' id='send' disabled={busy || argsInvalid || text.trim() === ''}>Send</button>
          <button type='button' id='stop' disabled={!busy} onClick={onStop}>Stop</button>
        </div>
      </form>
      <p id='status' role='status' data-status={status} ref={end}>{STATUS[status]}</p>
    </>
  )
}

const STATUS = { ready: 'Ready', submitted: 'Sent…', streaming: 'Answering…', error: 'Failed' }

function App () {
  const saved = useMemo(loadSaved, [])
  // the key the agents were listed with: a new one lists them again once typed (Enter, or leaving the field)
  const [apiKey, setApiKey] = useState(() => sessionStorage.getItem(KEY_KEY) ?? '')
  const [agents, setAgents] = useState()
  const [agentsError, setAgentsError] = useState()
  const [agent, setAgent] = useState(saved.agent ?? '')
  const agentRef = useRef(agent)
  agentRef.current = agent
  const [chatId, setChatId] = useState(saved.chatId ?? crypto.randomUUID())
  const [args, setArgs] = useState(saved.args ?? '{}')
  const messagesRef = useRef(saved.messages ?? [])
  const argsRef = useRef({})
  argsRef.current = useMemo(() => {
    try {
      const value = JSON.parse(args === '' ? '{}' : args)
      return value !== null && typeof value === 'object' && !Array.isArray(value) ? { value } : { error: 'Arguments must be a JSON object' }
    } catch (err) {
      return { error: `Arguments are not JSON: ${err.message}` }
    }
  }, [args])

  const persist = useMemo(() => (changes) => {
    const next = { ...loadSaved(), ...changes }
    sessionStorage.setItem(CHAT_KEY, JSON.stringify(next))
  }, [])
  const onMessages = useMemo(() => (messages) => {
    messagesRef.current = messages
    persist({ messages })
  }, [persist])

  useEffect(() => {
    let gone = false
    setAgentsError(undefined)
    fetch('/v1/agents', { headers: authHeaders() }).then(async (res) => {
      if (!res.ok) throw new Error(`${describe(new Error(await res.text()))}${res.status === 401 ? ' (enter an API key with agents:read and assist:invoke)' : ''}`)
      return (await res.json()).agents
    }).then((list) => {
      if (gone) return
      setAgents(list)
      // the chat kept belongs to its agent: none of that name here (another key's list), a new chat
      if (!list.some((a) => a.metadata.name === agentRef.current)) {
        if (agentRef.current !== '') newChat()
        setAgent(list[0]?.metadata.name ?? '')
      }
      document.body.dataset.ready = 'true'
    }, (err) => { if (!gone) setAgentsError(err.message) })
    return () => { gone = true }
  }, [apiKey])

  function newChat () {
    messagesRef.current = []
    const id = crypto.randomUUID()
    persist({ chatId: id, messages: [] })
    setChatId(id)
  }
  useEffect(() => { persist({ agent, chatId, args }) }, [agent, chatId, args, persist])

  const described = agents?.find((a) => a.metadata.name === agent)
  return (
    <>
      <header>
        <h1>agent-host chat</h1>
        <nav>
          <a href='/playground/'>Playground</a>
          <a href='/docs'>Swagger UI</a>
        </nav>
        <p className='hint'>The AI SDK's <code>useChat</code> against <code>/ai-sdk/{agent || '<agent>'}/chat</code></p>
      </header>
      <main>
        <section id='settings' aria-label='Settings'>
          <label>API key <small>(when the server asks for one; kept for this tab only)</small>
            <input
              id='api-key' type='password' autoComplete='off' placeholder='Bearer key' defaultValue={apiKey}
              onChange={(event) => { sessionStorage.setItem(KEY_KEY, event.target.value.trim()) }}
              onBlur={(event) => { setApiKey(event.target.value.trim()) }}
              onKeyDown={(event) => { if (event.key === 'Enter') setApiKey(event.currentTarget.value.trim()) }}
            />
          </label>
          <label>Agent
            <select id='agent' value={agent} onChange={(event) => { setAgent(event.target.value); newChat() }}>
              {(agents ?? []).map((a) => <option key={a.metadata.id} value={a.metadata.name}>{a.metadata.name}</option>)}
            </select>
          </label>
          {described !== undefined && <p className='hint'>{described.capabilities[0]?.description}</p>}
          {agentsError !== undefined && <p className='error' role='alert'>Agents: {agentsError}</p>}
          <label>Arguments <small>(JSON, sent as body fields: the agent's inputs besides the message, its <code>query</code>)</small>
            <textarea id='args' rows={4} value={args} onChange={(event) => setArgs(event.target.value)} aria-invalid={argsRef.current.error !== undefined} />
          </label>
          {argsRef.current.error !== undefined && <p className='error' role='alert'>{argsRef.current.error}</p>}
          <p className='session'>Chat <code id='chat-id'>{chatId}</code> <button type='button' id='new-chat' onClick={newChat}>New chat</button></p>
        </section>
        <section id='chat' aria-label='Chat'>
          {agent !== '' && <Chat key={`${agent}\u0000${chatId}`} agent={agent} chatId={chatId} initialMessages={messagesRef.current} argsRef={argsRef} argsInvalid={argsRef.current.error !== undefined} onMessages={onMessages} />}
        </section>
      </main>
    </>
  )
}

createRoot(document.getElementById('root')).render(<App />)
