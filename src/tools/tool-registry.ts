import type { Tool as McpTool } from '@modelcontextprotocol/sdk/types.js'
import type { Tool, ToolAction, ToolScope } from '../protocol/tools.js'
import { BranchScope } from './branch-scope.js'
import { recordToolCall, type ToolRecordStores } from './call-record.js'
import { McpConnection, type ConnectionOptions } from './mcp-connection.js'
import { PathScope } from './path-scope.js'
import type { ToolServerSpec } from './servers-file.js'
import { toolCaller, type RegisteredTool, type RunToolCaller, type ToolCallers, type ToolCallerOptions, type ToolRunContext } from './tool-caller.js'

/** How long `describe()` waits for a running server's list of tools. */
const LIST_TIMEOUT_MS = 5000

/**
 * The MCP servers the operator registered (`MCP_SERVERS_FILE`), each a tool agents call by name.
 * Each server starts on its first call (see {@link McpConnection}); {@link caller} gives a run its
 * `host.tools`, {@link describe} is `GET /v1/tools`, {@link close} stops every server.
 */
export class McpToolRegistry implements ToolCallers {
  readonly #tools = new Map<string, RegisteredTool>()
  readonly #calls: ToolCallerOptions

  /**
   * @param servers the servers of MCP_SERVERS_FILE (`Config.MCP_SERVERS`)
   * @param options how servers are started, and where calls are recorded
   */
  constructor (servers: readonly ToolServerSpec[], options: ConnectionOptions & { stores: Omit<ToolRecordStores, 'log'> }) {
    const stores = { ...options.stores, log: options.log }
    this.#calls = { tools: this, record: async (run, call) => { await recordToolCall(stores, run, call) }, log: options.log }
    for (const spec of servers) {
      this.#tools.set(spec.name, {
        connection: new McpConnection(spec, options),
        ...(spec.paths !== undefined ? { paths: new PathScope(spec.paths) } : {}),
        ...(spec.branches !== undefined ? { branches: new BranchScope(spec.branches) } : {})
      })
    }
  }

  /** The tool named `name`. */
  get (name: string): RegisteredTool | undefined {
    return this.#tools.get(name)
  }

  /** The registered tools' names, in the file's order. */
  names (): string[] {
    return [...this.#tools.keys()]
  }

  /** `host.tools` for one run: its agent, its caller and its signal (and the ends of calls that wait for approval). */
  caller (run: ToolRunContext): RunToolCaller {
    return toolCaller(this.#calls, run)
  }

  /**
   * Every tool with its status and rules; a running server is asked for its tools (their
   * descriptions and input schemas). With `start`, servers not running are started first (one that
   * cannot start is listed `failed`, with why).
   */
  async describe (options: { start?: boolean } = {}): Promise<Tool[]> {
    return await Promise.all([...this.#tools.values()].map(async ({ connection }) => {
      if (options.start === true && connection.status !== 'running') await connection.client().catch(() => {})
      let listed: McpTool[] | undefined
      if (connection.status === 'running') listed = await connection.listTools(LIST_TIMEOUT_MS).catch(() => undefined)
      return describeOne(connection, listed)
    }))
  }

  /** Stop every server. */
  async close (): Promise<void> {
    await Promise.all([...this.#tools.values()].map(async ({ connection }) => { await connection.close() }))
  }
}

function describeOne (connection: McpConnection, listed: McpTool[] | undefined): Tool {
  const spec = connection.spec
  const actions: ToolAction[] = [...spec.actions].map(([name, tool]) => {
    if (listed === undefined) return { name, tool }
    const found = listed.find((t) => t.name === tool)
    if (found === undefined) return { name, tool, listed: false }
    return {
      name,
      tool,
      listed: true,
      ...(found.title !== undefined ? { title: found.title } : {}),
      ...(found.description !== undefined ? { description: found.description } : {}),
      input_schema: found.inputSchema as Record<string, unknown>
    }
  })
  const scope: ToolScope = {
    ...(spec.paths !== undefined ? { root: spec.paths.root, paths: [...spec.paths.patterns], path_arguments: [...spec.paths.arguments] } : {}),
    ...(spec.branches !== undefined ? { branch_pattern: spec.branches.pattern, branch_arguments: [...spec.branches.arguments] } : {})
  }
  const error = connection.error
  return {
    name: spec.name,
    transport: spec.transport.kind,
    status: connection.status,
    ...(connection.status === 'failed' && error !== undefined ? { error } : {}),
    agents: spec.agents !== undefined ? [...spec.agents] : null,
    actions,
    scope,
    timeout: spec.timeoutS,
    retries: spec.retries,
    ...(spec.requireApproval !== undefined ? { require_approval: spec.requireApproval === true ? true : [...spec.requireApproval] } : {})
  }
}
