// The playground: pick an agent and capability, fill its inputs, watch the run live, cancel it,
// reload and resume it; the session and what was typed survive a reload (sessionStorage). A run that
// stops to ask (human in the loop) shows its questions as forms, whose answers resume it below.
// Everything goes through the TypeScript client (client/, served at /playground/client/); markdown
// is rendered with marked and sanitised with DOMPurify before it touches the page.
import { AgentHostClient, buildEnvelope, buildResumeEnvelope, isInterrupted } from '/playground/client/index.js'
import { marked } from 'marked'
import DOMPurify from 'dompurify'

const $ = (id) => document.getElementById(id)
const RUN_KEY = 'agent-host.playground.run'
const KEY_KEY = 'agent-host.playground.apiKey'
const FORM_KEY = 'agent-host.playground.form'
const SESSION_KEY = 'agent-host.playground.session'
const MAX_SAVED_PACKETS = 5000

const state = { agents: [], controller: undefined, run: undefined, runEl: undefined, rawJson: false, saveTimer: undefined, sessionId: undefined }

function client () {
  const apiKey = $('api-key').value.trim()
  return new AgentHostClient({ baseUrl: location.origin, ...(apiKey !== '' ? { apiKey } : {}) })
}

function setStatus (text, kind = '') {
  $('status').textContent = text
  $('status').className = kind
}

function fail (err) {
  setStatus(describe(err), 'failed')
}

function describe (err) {
  return err?.code !== undefined ? `${err.code}: ${err.message}` : String(err?.message ?? err)
}

// --- the request: agents, a form from the capability's inputs schema, or raw JSON ---

function agent () {
  return state.agents.find((a) => a.metadata.id === $('agent').value)
}

function capability () {
  const capabilities = agent()?.capabilities ?? []
  return capabilities.find((c) => c.name === $('capability').value) ?? capabilities[0]
}

/** The capability menu of the chosen agent, shown only when it has several. */
function renderCapabilities () {
  const capabilities = agent()?.capabilities ?? []
  $('capability').replaceChildren(...capabilities.map((c) => new Option(`${c.name} — ${c.description}`, c.name)))
  $('capability-box').hidden = capabilities.length < 2
}

// CAP.md §3: every capability answers in either mode (Accept decides); its delivery_mode is the default
const defaultMode = (cap) => cap?.delivery_mode === 'server_sent_events' ? 'sse' : 'json'

function field (name, schema, required) {
  const label = document.createElement('label')
  label.textContent = `${name}${required ? ' *' : ''}`
  if (schema.description !== undefined) label.title = schema.description
  let input
  if (Array.isArray(schema.enum)) {
    input = document.createElement('select')
    for (const value of schema.enum) input.append(new Option(String(value), JSON.stringify(value)))
  } else if (schema.type === 'boolean') {
    input = document.createElement('input')
    input.type = 'checkbox'
    input.checked = schema.default === true
  } else if (schema.type === 'number' || schema.type === 'integer') {
    input = document.createElement('input')
    input.type = 'number'
    if (schema.type === 'integer') input.step = '1'
    if (schema.default !== undefined) input.value = String(schema.default)
  } else if (schema.type === 'string') {
    input = document.createElement('textarea')
    input.rows = name === 'query' || (schema.maxLength ?? 1000) > 200 ? 3 : 1
    if (schema.default !== undefined) input.value = schema.default
  } else {
    input = document.createElement('textarea')
    input.rows = 2
    input.placeholder = 'JSON'
    if (schema.default !== undefined) input.value = JSON.stringify(schema.default)
  }
  input.name = name
  input.dataset.kind = Array.isArray(schema.enum) ? 'enum' : (schema.type ?? 'json')
  label.append(input)
  return label
}

function renderForm () {
  const cap = capability()
  const form = $('inputs-form')
  form.replaceChildren()
  $('agent-description').textContent = cap === undefined ? '' : `${cap.description} (answers ${cap.delivery_mode === 'server_sent_events' ? 'as a stream' : 'in JSON'} by default)`
  const schema = cap?.inputs ?? {}
  const properties = schema.properties ?? {}
  const required = new Set(schema.required ?? [])
  for (const [name, prop] of Object.entries(properties)) form.append(field(name, prop, required.has(name)))
  if (Object.keys(properties).length === 0) form.append(Object.assign(document.createElement('p'), { className: 'hint', textContent: 'This capability declares no fields: use Raw JSON.' }))
  $('inputs-json').value = JSON.stringify(formValues(), null, 2)
  const mode = defaultMode(cap)
  document.querySelector(`input[name=mode][value=${mode}]`).checked = true
  for (const input of document.querySelectorAll('input[name=mode]')) input.parentElement.querySelector('.mode-default').textContent = input.value === mode ? ' (the default)' : ''
}

function chooseAgent () {
  renderCapabilities()
  renderForm()
}

// --- what was typed, and the session: kept for this tab, so that a reload shows them again ---

function saveForm () {
  const fields = {}
  for (const input of $('inputs-form').querySelectorAll('[name]')) fields[input.name] = input.type === 'checkbox' ? input.checked : input.value
  sessionStorage.setItem(FORM_KEY, JSON.stringify({
    agent: $('agent').value,
    capability: $('capability').value,
    fields,
    json: $('inputs-json').value,
    raw: state.rawJson,
    mode: document.querySelector('input[name=mode]:checked').value,
    keepSession: $('keep-session').checked
  }))
}

function restoreForm () {
  const saved = JSON.parse(sessionStorage.getItem(FORM_KEY) ?? 'null')
  if (saved === null || !state.agents.some((a) => a.metadata.id === saved.agent)) return
  $('agent').value = saved.agent
  renderCapabilities()
  if (agent().capabilities.some((c) => c.name === saved.capability)) $('capability').value = saved.capability
  renderForm()
  for (const input of $('inputs-form').querySelectorAll('[name]')) {
    const value = saved.fields?.[input.name]
    if (value === undefined) continue
    if (input.type === 'checkbox') input.checked = value === true
    else input.value = value
  }
  showTab(saved.raw === true)
  if (typeof saved.json === 'string') $('inputs-json').value = saved.json
  const mode = document.querySelector(`input[name=mode][value=${saved.mode}]`)
  if (mode !== null) mode.checked = true
  $('keep-session').checked = saved.keepSession !== false
}

/** The session the next run continues (`undefined`: a new one), shown with its id. */
function setSession (sessionId) {
  state.sessionId = sessionId
  if (sessionId === undefined) sessionStorage.removeItem(SESSION_KEY)
  else sessionStorage.setItem(SESSION_KEY, sessionId)
  $('session-id').textContent = sessionId ?? 'a new one at the next run'
}

function formValues () {
  return valuesOf($('inputs-form'))
}

/** The values of a form made by {@link field}, typed by each field's schema. */
function valuesOf (form) {
  const values = {}
  for (const input of form.querySelectorAll('[name]')) {
    const kind = input.dataset.kind
    if (kind === 'boolean') values[input.name] = input.checked
    else if (input.value === '') continue
    else if (kind === 'number' || kind === 'integer') values[input.name] = Number(input.value)
    else if (kind === 'string') values[input.name] = input.value
    else values[input.name] = JSON.parse(input.value)
  }
  return values
}

function inputs () {
  return state.rawJson ? JSON.parse($('inputs-json').value || '{}') : formValues()
}

function showTab (raw) {
  if (raw && !state.rawJson) {
    try { $('inputs-json').value = JSON.stringify(formValues(), null, 2) } catch {}
  }
  state.rawJson = raw
  $('inputs-form').hidden = raw
  $('inputs-json').hidden = !raw
  $('tab-form').setAttribute('aria-selected', String(!raw))
  $('tab-json').setAttribute('aria-selected', String(raw))
}

// --- the output: one panel per stream, each packet rendered as it arrives ---

/** The packets of one request (a run, or the resume that goes on with it) go in a box of their own, below the last. */
function runBox () {
  if (state.runEl === undefined || !state.runEl.isConnected) {
    state.runEl = Object.assign(document.createElement('div'), { className: 'run' })
    $('streams').append(state.runEl)
  }
  return state.runEl
}

function panel (streamId) {
  let el = runBox().querySelector(`[data-stream="${CSS.escape(streamId)}"]`)
  if (el !== null) return el
  el = document.createElement('article')
  el.className = 'stream'
  el.dataset.stream = streamId
  // every other stream opens with a STREAM_START, which names its panel
  const title = Object.assign(document.createElement('h2'), { textContent: 'Main stream' })
  const status = Object.assign(document.createElement('span'), { className: 'stream-status', textContent: 'open' })
  title.append(' ', status)
  el.append(title, Object.assign(document.createElement('div'), { className: 'events' }))
  runBox().append(el)
  return el
}

function block (el, className, ...children) {
  const div = document.createElement('div')
  div.className = className
  div.append(...children)
  el.querySelector('.events').append(div)
  return div
}

const isWebUrl = (url) => { try { return ['http:', 'https:'].includes(new URL(url, location.href).protocol) } catch { return false } }
const isLocalImage = (url) => { try { const u = new URL(url, location.href); return u.protocol === 'data:' || u.origin === location.origin } catch { return false } }
const pre = (value) => Object.assign(document.createElement('pre'), { textContent: JSON.stringify(value, null, 2) })

function renderEvent (el, event) {
  switch (event.type) {
    case 'THOUGHT_TRACE': block(el, `thought ${String(event.data.status).toLowerCase()}`, event.data.thought); break
    case 'MARKDOWN_BLOCK': block(el, 'markdown').innerHTML = DOMPurify.sanitize(marked.parse(event.data.content)); break
    case 'STREAM_START': el.querySelector('h2').firstChild.textContent = event.title ?? 'Stream'; break
    case 'DATA': {
      const details = document.createElement('details')
      details.open = true
      details.append(Object.assign(document.createElement('summary'), { textContent: event.title ?? 'Data' }), pre(event.data))
      block(el, 'data', details)
      break
    }
    case 'INTERRUPT': block(el, 'asked', `Asked ${event.interrupts.length === 1 ? 'a question' : `${event.interrupts.length} questions`}: answer below.`); break
    case 'RESULT': block(el, 'result', Object.assign(document.createElement('strong'), { textContent: 'Result' }), pre(event.data)); break
    case 'CITATION_BLOCK': {
      const list = document.createElement('ol')
      for (const c of event.data.citations) {
        const item = document.createElement('li')
        const link = isWebUrl(c.uri) ? Object.assign(document.createElement('a'), { href: c.uri, rel: 'noopener noreferrer', target: '_blank' }) : document.createElement('span')
        link.textContent = c.title
        item.append(link)
        if (c.snippet !== undefined) item.append(` — ${c.snippet}`)
        list.append(item)
      }
      block(el, 'citations', list)
      break
    }
    case 'PROGRESS_INDICATOR': {
      let row = [...el.querySelectorAll('.progress')].find((p) => p.dataset.label === event.data.label)
      if (row === undefined) {
        row = block(el, 'progress', Object.assign(document.createElement('span'), { textContent: event.data.label }), document.createElement('progress'))
        row.dataset.label = event.data.label
      }
      const bar = row.querySelector('progress')
      if (event.data.progress_percent !== undefined) bar.value = event.data.progress_percent
      else if (event.data.status === 'complete') bar.value = 1
      row.dataset.status = event.data.status
      break
    }
    case 'MEDIA_CAROUSEL': {
      const items = event.data.items.map((m) => {
        if (m.mime_type.startsWith('image/') && isLocalImage(m.url)) return Object.assign(document.createElement('img'), { src: m.url, alt: m.alt_text ?? '' })
        // an image elsewhere is a link: the page loads nothing from other servers by itself
        return isWebUrl(m.url) ? Object.assign(document.createElement('a'), { href: m.url, textContent: m.alt_text ?? m.url, rel: 'noopener noreferrer', target: '_blank' }) : document.createTextNode(m.alt_text ?? m.url)
      })
      block(el, 'media', ...items)
      break
    }
    default: block(el, 'event', pre(event))
  }
}

function render (packet) {
  const el = panel(packet.stream_id)
  if (packet.op === 'DELTA') {
    let text = el.querySelector('.events > .delta:last-child')
    if (text === null) text = block(el, 'delta')
    text.append(packet.p)
  } else if (packet.op === 'EVENT') renderEvent(el, packet.p)
  else if (packet.op === 'ERROR') block(el, `error ${packet.p.severity.toLowerCase()}`, `${packet.p.severity} ${packet.p.code}: ${packet.p.message}`)
  else if (packet.op === 'CLOSE') {
    el.querySelector('.stream-status').textContent = `closed: ${packet.p}`
    el.dataset.closed = packet.p
  }
  $('packets').append(JSON.stringify(packet) + '\n')
  $('packet-count').textContent = String(Number($('packet-count').textContent) + 1)
}

// --- a run: streamed with resume, or answered in JSON; saved so that a reload can resume it ---

function save (now = false) {
  clearTimeout(state.saveTimer)
  const write = () => { if (state.run !== undefined) sessionStorage.setItem(RUN_KEY, JSON.stringify(state.run)) }
  if (now) write()
  else state.saveTimer = setTimeout(write, 100)
}

function resetOutput () {
  $('streams').replaceChildren()
  state.runEl = undefined
  $('packets').textContent = ''
  $('packet-count').textContent = '0'
  $('answer').textContent = ''
  $('answer-box').open = false
}

function running (on) {
  $('run').disabled = on
  $('cancel').disabled = !on
}

/** Streams a run into the page; the error that ended it, if any. */
async function follow (envelope, resumeFrom) {
  state.controller = new AbortController()
  running(true)
  try {
    const packets = client().stream(envelope, { signal: state.controller.signal, ...(resumeFrom !== undefined ? { resumeFrom } : {}), onResume: (cursor, attempt) => { setStatus(`Connection lost; resuming after ${cursor} (attempt ${attempt})…`) } })
    for await (const packet of packets) {
      if (packet.op === 'CLOSE' && packet.p !== 'done') state.run.closed ??= packet.p
      if (state.run.packets.length < MAX_SAVED_PACKETS) state.run.packets.push(packet)
      state.run.cursor = `${packet.stream_id}:${packet.seq}`
      render(packet)
      save()
      setStatus(`Running ${envelope.request_id}: ${state.run.packets.length} packets`)
    }
    state.run.done = true
    if (isInterrupted(packets)) state.run.interrupts = packets.interrupts
    ended(`${state.run.packets.length} packets`)
    if (state.run.closed === 'input_required' && state.run.interrupts !== undefined) renderInterrupts(state.run)
  } catch (err) {
    setStatus(describe(err), 'failed')
    return err
  } finally {
    save(true)
    running(false)
  }
}

/** The status of a run that ended: done, or closed early (cancelled, shut down, aborted), which is no success. */
function ended (what) {
  const reason = state.run.closed ?? (state.run.cancelRequested ? 'cancelled' : undefined)
  if (reason === undefined) setStatus(`Done: ${what}`, 'ok')
  else if (reason === 'input_required') setStatus(`Waiting for an answer: ${what}`, 'waiting')
  else if (reason === 'cancelled') setStatus(`Cancelled: ${what}`, 'cancelled')
  else setStatus(`Closed (${reason}): ${what}`, 'failed')
}

async function run () {
  let envelope
  try {
    const cap = capability()
    const keep = $('keep-session').checked && state.sessionId !== undefined
    envelope = buildEnvelope({
      agentId: $('agent').value,
      input: inputs(),
      ...(cap !== undefined ? { metadata: { capability: cap.name } } : {}),
      ...(keep ? { sessionId: state.sessionId } : {})
    })
  } catch (err) {
    setStatus(`Inputs: ${describe(err)}`, 'failed')
    return
  }
  setSession(envelope.context.session_id)
  saveForm()
  resetOutput()
  const mode = document.querySelector('input[name=mode]:checked').value
  state.run = { envelope, mode, packets: [], cursor: undefined, done: false }
  if (mode === 'sse') {
    save(true)
    await follow(envelope)
    return
  }
  await ask(envelope)
}

/** A run answered in JSON; the error that refused it, if any. */
async function ask (envelope) {
  state.controller = new AbortController()
  running(true)
  setStatus(`Running ${envelope.request_id}…`)
  try {
    const answer = await client().assist(envelope, { signal: state.controller.signal })
    $('answer').textContent = JSON.stringify(answer, null, 2)
    $('answer-box').open = true
    state.run.done = true
    if (isInterrupted(answer)) {
      state.run.closed = 'input_required'
      state.run.interrupts = answer.interrupts
      // a reload shows the questions again
      save(true)
    }
    // a plain run's answer is the JSON above; a question's, or an answer's, goes in the run's place too
    if (state.run.interrupts === undefined && envelope.payload.payload.resume === undefined) return
    const box = runBox()
    const article = Object.assign(document.createElement('article'), { className: 'stream json-answer' })
    article.append(Object.assign(document.createElement('h2'), { textContent: 'JSON answer' }), Object.assign(document.createElement('div'), { className: 'events' }))
    box.append(article)
    if (state.run.interrupts === undefined) block(article, 'result', Object.assign(document.createElement('strong'), { textContent: 'Result' }), pre(answer.output))
    else block(article, 'asked', `Asked ${answer.interrupts.length === 1 ? 'a question' : `${answer.interrupts.length} questions`}: answer below.`)
    ended('the JSON answer')
    if (state.run.interrupts !== undefined) renderInterrupts(state.run)
  } catch (err) {
    setStatus(describe(err), 'failed')
    return err
  } finally {
    running(false)
  }
}

// --- human in the loop: a run that stopped to ask shows each question as a form; an answer resumes it ---

/** A field of an answer's form: as the request's fields, but a string is a one-line text input. */
function answerField (name, schema, required) {
  if (schema.type !== 'string' || Array.isArray(schema.enum)) {
    const label = field(name, schema, required)
    const input = label.querySelector('[name]')
    // a required checkbox would have to be ticked: false is an answer too
    if (required && input.type !== 'checkbox') input.required = true
    return label
  }
  const label = document.createElement('label')
  label.textContent = `${name}${required ? ' *' : ''}`
  if (schema.description !== undefined) label.title = schema.description
  const input = Object.assign(document.createElement('input'), { type: 'text', name, required })
  input.dataset.kind = 'string'
  if (schema.default !== undefined) input.value = schema.default
  label.append(input)
  return label
}

const isObjectSchema = (schema) => schema?.type === 'object' && typeof schema.properties === 'object' && schema.properties !== null && Object.keys(schema.properties).length > 0

/** The open questions of `asked` (a run that closed "input_required"), below its packets; each answer resumes it. */
function renderInterrupts (asked) {
  const box = Object.assign(document.createElement('section'), { className: 'interrupts' })
  box.setAttribute('aria-label', 'Questions from the agent')
  box.append(...asked.interrupts.map((interrupt) => interruptForm(asked, interrupt)))
  $('streams').append(box)
  box.querySelector('input, select, textarea, button')?.focus()
}

function interruptForm (asked, interrupt) {
  const section = Object.assign(document.createElement('article'), { className: `interrupt ${interrupt.kind}` })
  section.dataset.interrupt = interrupt.id
  const titleId = `interrupt-${interrupt.id}`
  section.setAttribute('aria-labelledby', titleId)
  const title = Object.assign(document.createElement('h2'), { id: titleId, textContent: interrupt.kind === 'approval' ? 'Approval needed' : 'The agent asks' })
  const message = Object.assign(document.createElement('p'), { className: 'message', textContent: interrupt.message })
  section.append(title, message)
  if (interrupt.call !== undefined) {
    const details = document.createElement('details')
    details.open = true
    details.append(Object.assign(document.createElement('summary'), { textContent: 'Call' }), pre(interrupt.call))
    section.append(details)
  }
  if (interrupt.reason === 'auth') section.append(Object.assign(document.createElement('p'), { className: 'hint', textContent: 'It asks for a sign-in.' }))
  const expires = Object.assign(document.createElement('p'), { className: 'hint expires' })
  expires.append('Answer by ', Object.assign(document.createElement('time'), { dateTime: interrupt.expires_at, textContent: new Date(interrupt.expires_at).toLocaleString() }))
  section.append(expires)

  const form = document.createElement('form')
  form.setAttribute('aria-labelledby', titleId)
  const fields = document.createElement('fieldset')
  fields.append(Object.assign(document.createElement('legend'), { className: 'visually-hidden', textContent: 'Your answer' }))
  const error = Object.assign(document.createElement('div'), { className: 'interrupt-error' })
  error.setAttribute('role', 'alert')
  let valueOf
  if (interrupt.kind === 'approval') {
    const comment = Object.assign(document.createElement('textarea'), { name: 'comment', rows: 2 })
    const label = Object.assign(document.createElement('label'), { textContent: 'Comment (optional)' })
    label.append(comment)
    const actions = Object.assign(document.createElement('div'), { className: 'actions' })
    actions.append(Object.assign(document.createElement('button'), { type: 'submit', value: 'approve', textContent: 'Approve' }), Object.assign(document.createElement('button'), { type: 'submit', value: 'reject', className: 'reject', textContent: 'Reject' }))
    fields.append(label, actions)
    valueOf = (submitter) => ({ approved: submitter?.value === 'approve', ...(comment.value.trim() !== '' ? { comment: comment.value.trim() } : {}) })
  } else if (isObjectSchema(interrupt.schema)) {
    const required = new Set(interrupt.schema.required ?? [])
    const answers = document.createElement('div')
    for (const [name, prop] of Object.entries(interrupt.schema.properties)) answers.append(answerField(name, prop, required.has(name)))
    fields.append(answers, Object.assign(document.createElement('button'), { type: 'submit', textContent: 'Answer' }))
    valueOf = () => valuesOf(answers)
  } else {
    const json = Object.assign(document.createElement('textarea'), { name: 'answer', rows: 4, placeholder: 'JSON' })
    const label = Object.assign(document.createElement('label'), { textContent: 'Answer (JSON)' })
    if (interrupt.schema !== undefined) label.title = JSON.stringify(interrupt.schema)
    label.append(json)
    fields.append(label, Object.assign(document.createElement('button'), { type: 'submit', textContent: 'Answer' }))
    valueOf = () => {
      try {
        json.removeAttribute('aria-invalid')
        return JSON.parse(json.value)
      } catch (err) {
        json.setAttribute('aria-invalid', 'true')
        throw new Error(`The answer is not JSON: ${err.message}`)
      }
    }
  }
  form.append(fields)
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    let value
    try {
      value = valueOf(event.submitter)
    } catch (err) {
      showAnswerError(error, err)
      return
    }
    answer(asked, interrupt, value, fields, error).catch(fail)
  })
  section.append(form, error)
  return section
}

function showAnswerError (el, err) {
  el.replaceChildren(Object.assign(document.createElement('p'), { textContent: describe(err) }))
  const errors = err?.details?.errors
  if (Array.isArray(errors)) {
    const list = document.createElement('ul')
    for (const e of errors) list.append(Object.assign(document.createElement('li'), { textContent: `${e.path ?? ''} ${e.message ?? ''}`.trim() }))
    el.append(list)
  }
}

/**
 * Sends one answer, in the asking run's session and mode, and shows the run going on below. A
 * refusal shows next to the form; after a 400 (a wrong answer) the question is still open.
 */
async function answer (asked, interrupt, value, fields, error) {
  fields.disabled = true
  error.replaceChildren()
  const envelope = buildResumeEnvelope(asked.envelope, [{ interrupt_id: interrupt.id, value }])
  state.run = { envelope, mode: asked.mode, packets: [], cursor: undefined, done: false }
  state.runEl = undefined
  const box = runBox()
  let err
  if (asked.mode === 'sse') {
    save(true)
    err = await follow(envelope)
  } else {
    err = await ask(envelope)
  }
  if (err === undefined || state.run.packets.length > 0) {
    const section = fields.closest('.interrupt')
    section.dataset.answered = 'true'
    section.append(Object.assign(document.createElement('p'), { className: 'hint answered', textContent: interrupt.kind === 'approval' ? `Answered: ${value.approved ? 'approved' : 'rejected'}.` : 'Answered.' }))
    return
  }
  // refused: nothing ran, the asking run is still the one on show
  box.remove()
  state.runEl = undefined
  state.run = asked
  save(true)
  showAnswerError(error, err)
  fields.disabled = err?.status === 409 || err?.status === 410 || err?.status === 404
  if (!fields.disabled) fields.querySelector('input, select, textarea, button')?.focus()
}

async function cancel () {
  const requestId = state.run?.envelope.request_id
  if (requestId === undefined) return
  try {
    await client().cancel(requestId)
    state.run.cancelRequested = true
    // the run's end says "Cancelled"; until then, say that it is asked
    if (!$('run').disabled) return
    setStatus(`Cancelling ${requestId}…`, 'cancelled')
  } catch (err) {
    // a JSON run, or a run that already ended: stop waiting for it here
    state.controller?.abort()
    setStatus(describe(err), 'failed')
  }
}

async function resumeSaved () {
  const saved = JSON.parse(sessionStorage.getItem(RUN_KEY) ?? 'null')
  if (saved === null || saved.envelope === undefined) return
  const waiting = saved.done && saved.closed === 'input_required' && saved.interrupts !== undefined
  if (saved.done && !waiting) return
  state.run = saved
  resetOutput()
  for (const packet of saved.packets) render(packet)
  if (waiting) {
    ended(`${saved.packets.length} packets`)
    renderInterrupts(saved)
    return
  }
  setStatus(`Resuming ${saved.envelope.request_id} after ${saved.cursor ?? 'the start'}…`)
  await follow(saved.envelope, saved.cursor)
}

async function start () {
  $('api-key').value = sessionStorage.getItem(KEY_KEY) ?? ''
  // a session belongs to the key that started it: another key starts its own
  $('api-key').addEventListener('change', () => { sessionStorage.setItem(KEY_KEY, $('api-key').value.trim()); setSession(undefined); loadAgents().catch(fail) })
  $('agent').addEventListener('change', chooseAgent)
  $('capability').addEventListener('change', renderForm)
  $('tab-form').addEventListener('click', () => { showTab(false); saveForm() })
  $('tab-json').addEventListener('click', () => { showTab(true); saveForm() })
  $('request').addEventListener('input', saveForm)
  $('request').addEventListener('change', saveForm)
  $('new-session').addEventListener('click', () => { setSession(undefined) })
  $('run').addEventListener('click', () => { run().catch(fail) })
  $('cancel').addEventListener('click', () => { cancel().catch(fail) })
  addEventListener('pagehide', () => { save(true) })
  setSession(sessionStorage.getItem(SESSION_KEY) ?? undefined)
  await loadAgents()
  restoreForm()
  await resumeSaved()
}

async function loadAgents () {
  try {
    state.agents = await client().agents()
  } catch (err) {
    setStatus(`Agents: ${describe(err)}${err?.status === 401 ? ' (enter an API key with agents:read and assist:invoke)' : ''}`, 'failed')
    return
  }
  const select = $('agent')
  const chosen = select.value
  select.replaceChildren(...state.agents.map((a) => new Option(`${a.metadata.name} — ${a.capabilities.length > 1 ? `${a.capabilities.length} capabilities` : a.capabilities[0]?.description ?? ''}`, a.metadata.id)))
  if (state.agents.some((a) => a.metadata.id === chosen)) select.value = chosen
  // the same agent again (a new key): keep what was typed
  if (select.value !== chosen || $('inputs-form').childElementCount === 0) chooseAgent()
  setStatus(`${state.agents.length} agents`)
  document.body.dataset.ready = 'true'
}

start().catch(fail)
