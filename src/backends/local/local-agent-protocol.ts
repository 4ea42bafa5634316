import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdirSync, realpathSync } from 'node:fs'
import { delimiter, isAbsolute, join, relative, resolve, sep } from 'node:path'
import { createInterface } from 'node:readline'
import which from 'which'
import { AH_ERR_BACKEND_CONFIG, AH_ERR_BACKEND_FAILED } from '../../errors.js'
import {
  BaseProtocol, ParseState, takeLines, type Message, type ParseResult, type ProtocolContext, type ProtocolLog,
  type ProtocolResponse, type SessionUsage, type StartConfig, type StreamChunk
} from '../protocol.js'

/** Settings of a {@link LocalAgentProtocol}. */
export interface LocalAgentOptions {
  name?: string
  /** argv of the agent, for example `['node', 'agent.mjs']`. */
  command: string[]
  dataDir: string
  /** A folder under `<dataDir>/workspaces`; each session works in its own subfolder of it. */
  workspace: string
  /** How long the agent may print nothing during a turn before its process group is killed. */
  inactivityTimeoutMs: number
  /** The whole environment of the subprocess (with AGENT_HOST_SESSION_ID): nothing of the server's is inherited. */
  env?: Readonly<Record<string, string>>
  log?: ProtocolLog
}

/** One process of a session. A session gets a new one after a failed turn. */
interface AgentProcess {
  child: ChildProcessWithoutNullStreams
  /** Where stdout goes during a turn. */
  sink?: (bytes: Buffer) => void
  exit?: { code: number | null, signal: NodeJS.Signals | null }
  onExit?: () => void
}

interface LocalSession {
  id: string
  messages: Message[]
  usage: SessionUsage
  proc?: AgentProcess
}

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/
const MEMORY_PREFIX = 'backend:'

function killGroup (child: ChildProcessWithoutNullStreams): void {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, 'SIGKILL')
  } catch {
    // the group is already gone
  }
}

/**
 * The local agent protocol (seed 004): a command-line agent run as a subprocess per session, in
 * its own process group and working directory (`DATA_DIR/workspaces/<workspace>/<session>`).
 * JSON lines both ways. To the agent: `{"type":"history","messages":[...]}` once when a session
 * with history is (re)started, then `{"type":"messages","messages":[...]}` per turn. From the
 * agent: `{"type":"text","text"}` and `{"type":"reasoning","text"}` while it works, then
 * `{"type":"result","content"?,"usage"?:{"input","output"},"stop_reason"?,"metadata"?,"cost"?}` or
 * `{"type":"error","message","retryable"?}` to end the turn. stderr goes to the log.
 */
export class LocalAgentProtocol extends BaseProtocol {
  readonly name: string
  readonly workspaceRoot: string
  readonly #o: LocalAgentOptions
  readonly #sessions = new Map<string, LocalSession>()

  constructor (options: LocalAgentOptions) {
    super()
    if (options.command.length === 0 || options.command[0] === '') throw new AH_ERR_BACKEND_CONFIG('the local agent command is empty')
    const root = resolve(options.dataDir, 'workspaces')
    const workspace = options.workspace
    if (isAbsolute(workspace) || workspace.split(/[\\/]/).includes('..')) {
      throw new AH_ERR_BACKEND_CONFIG(`CLI_AGENT_WORKSPACE "${workspace}" must be a relative folder name without "..": it must stay inside ${root}`)
    }
    const path = resolve(root, workspace)
    const rel = relative(root, path)
    if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) throw new AH_ERR_BACKEND_CONFIG(`CLI_AGENT_WORKSPACE "${workspace}" must name a folder inside ${root}`)
    this.name = options.name ?? 'local'
    this.workspaceRoot = path
    this.#o = options
  }

  transportType (): 'local_agent' { return 'local_agent' }

  override async available (): Promise<boolean> {
    const bin = this.#o.command[0] as string
    // `which` reads an empty PATH entry (or an empty PATH) as the server's working directory: only listed folders count
    const path = (process.env.PATH ?? '').split(delimiter).filter((d) => d !== '').join(delimiter)
    if (path === '' && !bin.includes('/') && !bin.includes(sep)) return false
    return await which(bin, { path, nothrow: true }) !== null
  }

  override unavailableReason (): string {
    return `the local agent command "${this.#o.command[0] ?? ''}" is not an executable file: set CLI_AGENT_COMMAND`
  }

  async start (config: StartConfig, ctx: ProtocolContext): Promise<string> {
    const id = config.sessionId ?? randomUUID()
    if (!SESSION_ID.test(id)) throw new AH_ERR_BACKEND_CONFIG(`session id "${id}" is not usable as a folder name`)
    const session = this.#sessions.get(id) ?? { id, messages: [], usage: { input: 0, output: 0, cost: 0, turns: 0 } }
    if (this.#sessions.get(id) === undefined) {
      const stored = await ctx.memory?.get<{ messages?: Message[], usage?: SessionUsage }>(MEMORY_PREFIX + this.name)
      if (stored !== undefined && stored !== null && Array.isArray(stored.messages)) {
        session.messages = stored.messages
        if (stored.usage !== undefined) session.usage = stored.usage
      }
    }
    this.#sessions.set(id, session)
    if (session.proc === undefined) this.#spawn(session, ctx)
    return id
  }

  #spawn (session: LocalSession, ctx: ProtocolContext): void {
    const cwd = join(this.workspaceRoot, session.id)
    mkdirSync(cwd, { recursive: true })
    // by the real paths: a symlink anywhere on the way (made after boot, too) must not lead out of DATA_DIR/workspaces
    const root = realpathSync(resolve(this.#o.dataDir, 'workspaces'))
    const real = relative(root, realpathSync(cwd))
    if (real === '' || real.startsWith('..') || isAbsolute(real)) throw new AH_ERR_BACKEND_CONFIG(`the workspace ${cwd} leads out of ${root} (a symbolic link?): the agent is not started there`)
    const [bin, ...args] = this.#o.command as [string, ...string[]]
    const child = spawn(bin, args, {
      cwd,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...this.#o.env, AGENT_HOST_SESSION_ID: session.id }
    })
    const proc: AgentProcess = { child }
    session.proc = proc
    child.stdout.on('data', (bytes: Buffer) => { proc.sink?.(bytes) })
    child.stdin.on('error', () => {})
    child.on('error', (err) => {
      proc.exit = { code: -1, signal: null }
      this.#log(ctx).error({ session: session.id, err }, 'local agent could not run')
      proc.onExit?.()
    })
    // 'close', not 'exit': by then stdout has been read to the end
    child.on('close', (code, signal) => {
      proc.exit = { code, signal }
      if (session.proc === proc) delete session.proc
      proc.onExit?.()
    })
    const log = this.#log(ctx)
    createInterface({ input: child.stderr }).on('line', (line) => { log.warn({ session: session.id, stderr: line }, 'local agent stderr') })
    if (session.messages.length > 0) child.stdin.write(JSON.stringify({ type: 'history', messages: session.messages }) + '\n')
  }

  #log (ctx: ProtocolContext): ProtocolLog {
    return ctx.log ?? this.#o.log ?? { info () {}, warn () {}, error () {} }
  }

  async send (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
    if (ctx.signal?.aborted === true) throw ctx.signal.reason
    let session = this.#sessions.get(sessionId)
    if (session?.proc === undefined) {
      await this.start({ sessionId }, ctx)
      session = this.#sessions.get(sessionId) as LocalSession
    }
    const proc = session.proc as AgentProcess
    // one turn at a time per process: a second would read the first one's output
    if (proc.sink !== undefined) throw new AH_ERR_BACKEND_FAILED('backend_failed', 'The local agent is still answering another message in this session; send again when it is done', 'TRANSIENT')
    const before = session.messages.length
    session.messages.push(...messages)
    let response: ProtocolResponse
    try {
      response = await this.#turn(session, proc, messages, ctx)
    } catch (err) {
      // a failed turn is not part of the conversation: the caller may send the same messages again
      session.messages.length = before
      throw err
    }
    session.messages.push({ role: 'assistant', content: response.content })
    session.usage.turns++
    if (response.usage !== null) {
      session.usage.input += response.usage.input
      session.usage.output += response.usage.output
    }
    const cost = this.estimateCost(response)
    session.usage.cost += cost
    await ctx.memory?.store(MEMORY_PREFIX + this.name, { messages: session.messages, usage: session.usage })
    if (response.usage !== null) await this.streamMessage(sessionId, { type: 'usage', usage: response.usage, cost }, ctx)
    return response
  }

  async #turn (session: LocalSession, proc: AgentProcess, messages: Message[], ctx: ProtocolContext): Promise<ProtocolResponse> {
    const child = proc.child
    return await new Promise<ProtocolResponse>((resolve, reject) => {
      const state = new ParseState()
      let content = ''
      let settled = false
      let timer: NodeJS.Timeout | undefined
      let chain = Promise.resolve()
      const finish = (err: unknown, response?: ProtocolResponse): void => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        delete proc.sink
        delete proc.onExit
        ctx.signal?.removeEventListener('abort', onAbort)
        if (err !== undefined) {
          killGroup(child)
          // the next turn starts a new process (with the history)
          if (session.proc === proc) delete session.proc
          reject(err)
        } else resolve(response as ProtocolResponse)
      }
      const arm = (): void => {
        clearTimeout(timer)
        timer = setTimeout(() => {
          finish(new AH_ERR_BACKEND_FAILED('backend_timeout', `The local agent printed nothing for ${this.#o.inactivityTimeoutMs} ms; it was stopped`, 'TRANSIENT', { timeout_ms: this.#o.inactivityTimeoutMs }))
        }, this.#o.inactivityTimeoutMs)
      }
      const onAbort = (): void => { finish(ctx.signal?.reason) }
      const handle = async (result: ParseResult): Promise<void> => {
        if (settled) return
        if (result.type === 'error') {
          finish(new AH_ERR_BACKEND_FAILED('backend_failed', `The local agent wrote a line that is not a JSON object: ${result.error.message}`, 'FATAL'))
          return
        }
        if (result.type !== 'message') return
        const m = result.message
        if (m.type === 'text' && typeof m.text === 'string') {
          content += m.text
          await this.streamMessage(session.id, { type: 'text', text: m.text }, ctx)
        } else if (m.type === 'reasoning' && typeof m.text === 'string') {
          await this.streamMessage(session.id, { type: 'reasoning', text: m.text }, ctx)
        } else if (m.type === 'result') {
          const usage = m.usage as { input?: unknown, output?: unknown } | undefined
          const metadata = typeof m.metadata === 'object' && m.metadata !== null ? { ...m.metadata as Record<string, unknown> } : {}
          if (typeof m.cost === 'number') metadata.cost = m.cost
          finish(undefined, {
            content: typeof m.content === 'string' ? m.content : content,
            toolCalls: [],
            usage: usage !== undefined && Number.isInteger(usage.input) && Number.isInteger(usage.output) ? { input: usage.input as number, output: usage.output as number } : null,
            stopReason: typeof m.stop_reason === 'string' ? m.stop_reason : null,
            metadata
          })
        } else if (m.type === 'error') {
          finish(new AH_ERR_BACKEND_FAILED('backend_failed', `The local agent failed: ${String(m.message ?? 'no message')}`, m.retryable === true ? 'TRANSIENT' : 'FATAL'))
        }
      }
      proc.sink = (bytes) => {
        arm()
        // lines are handled one after another, so a slow client paces the agent's output
        for (const result of this.parseStream(bytes, state)) chain = chain.then(async () => { await handle(result) }).catch((err: unknown) => { finish(err) })
      }
      proc.onExit = () => {
        const exit = proc.exit
        chain = chain.then(() => {
          for (const result of this.parseStream(null, state)) handle(result).catch(() => {})
          if (settled) return
          const how = exit?.signal !== null && exit?.signal !== undefined ? `was killed by ${exit.signal}` : `exited with code ${String(exit?.code)}`
          if (exit?.code === 0) finish(new AH_ERR_BACKEND_FAILED('backend_failed', 'The local agent exited before it sent a result', 'FATAL', { exit_code: 0 }))
          else finish(new AH_ERR_BACKEND_FAILED('backend_failed', `The local agent ${how} mid-turn`, 'TRANSIENT', { exit_code: exit?.code ?? null, signal: exit?.signal ?? null }))
        })
      }
      ctx.signal?.addEventListener('abort', onAbort, { once: true })
      arm()
      if (proc.exit !== undefined) { proc.onExit(); return }
      child.stdin.write(JSON.stringify(this.formatMessages(messages)) + '\n')
    })
  }

  async resume (sessionId: string, messages: Message[], ctx: ProtocolContext): Promise<{ sessionId: string, response: ProtocolResponse }> {
    return { sessionId, response: await this.send(sessionId, messages, ctx) }
  }

  async stop (sessionId: string): Promise<void> {
    const session = this.#sessions.get(sessionId)
    const child = session?.proc?.child
    if (session === undefined || child === undefined) return
    delete session.proc
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve()
      else child.once('exit', () => { resolve() })
    })
    child.stdin.end()
    const timer = setTimeout(() => { killGroup(child) }, 1000)
    await exited
    clearTimeout(timer)
    // the agent may have left children of its own in the group
    killGroup(child)
  }

  /** Stop every session's process. */
  async close (): Promise<void> {
    await Promise.all([...this.#sessions.keys()].map(async (id) => { await this.stop(id) }))
  }

  formatMessages (messages: Message[], _ctx?: ProtocolContext): { type: 'messages', messages: Message[] } {
    return { type: 'messages', messages }
  }

  parseStream (chunk: Uint8Array | string | null, state: ParseState): ParseResult[] {
    const results: ParseResult[] = []
    for (const line of takeLines(chunk, state)) {
      if (line.trim() === '') continue
      let parsed: unknown
      try {
        parsed = JSON.parse(line)
      } catch {
        parsed = undefined
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        results.push({ type: 'error', error: new Error(JSON.stringify(line.slice(0, 200))) })
      } else if ((parsed as { type?: unknown }).type === 'eof') {
        results.push({ type: 'eof' })
      } else {
        results.push({ type: 'message', message: parsed as Record<string, unknown> })
      }
    }
    if (chunk === null) results.push({ type: 'eof' })
    else if (results.length === 0) results.push({ type: 'partial' })
    return results
  }

  override async streamMessage (_sessionId: string, chunk: StreamChunk, ctx: ProtocolContext): Promise<void> {
    await ctx.onStreamMessage?.(chunk)
  }

  override estimateCost (response: ProtocolResponse): number {
    return typeof response.metadata.cost === 'number' ? response.metadata.cost : 0
  }

  override getUsage (sessionId: string): SessionUsage | null {
    const usage = this.#sessions.get(sessionId)?.usage
    return usage === undefined ? null : { ...usage }
  }
}
