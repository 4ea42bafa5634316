import { Type, type Static } from 'typebox'
import { JsonObject } from './common.js'

/**
 * Seed 003's MCP tool contracts, as agents use them through `host.tools.call()`: a `ToolCall`
 * (`tool`, `action`, `args`, `timeout` in seconds, default the tool's own or 30; `retry_on_failure`,
 * default true) answered by a `ToolResponse` (`success`, `result`, `error`, `duration_ms`).
 */
export { ToolCall, ToolResponse } from './contract.js'

const closed = { additionalProperties: false } as const

/** Where a tool's MCP server is in its life. */
export const ToolStatus = Type.Union([Type.Literal('not_started'), Type.Literal('starting'), Type.Literal('running'), Type.Literal('failed')], {
  description: '`not_started`: no call needed it yet (servers start on first use); `failed`: it could not start, or its process exited (the next call starts it again)'
})
export type ToolStatus = Static<typeof ToolStatus>

/** One action agents may call, and the server's tool behind it. */
export const ToolAction = Type.Object({
  name: Type.String({ description: 'the action as agents call it (`ToolCall.action`)' }),
  tool: Type.String({ description: 'the MCP tool of the server that it calls' }),
  listed: Type.Optional(Type.Boolean({ description: 'whether the server lists that tool (absent while the server is not running)' })),
  title: Type.Optional(Type.String()),
  description: Type.Optional(Type.String({ description: 'what the server says of the tool' })),
  input_schema: Type.Optional(JsonObject)
}, { ...closed, title: 'ToolAction' })
export type ToolAction = Static<typeof ToolAction>

/** The scopes the host enforces before a call reaches the server. */
export const ToolScope = Type.Object({
  root: Type.Optional(Type.String({ description: 'the folder (its real path) that `paths` are relative to' })),
  paths: Type.Optional(Type.Array(Type.String(), { description: 'globs every path-valued argument must match, resolved by real path under `root`' })),
  path_arguments: Type.Optional(Type.Array(Type.String(), { description: 'the arguments that hold paths' })),
  branch_pattern: Type.Optional(Type.String({ description: 'the glob every branch-valued argument must match' })),
  branch_arguments: Type.Optional(Type.Array(Type.String(), { description: 'the arguments that hold a branch' }))
}, { ...closed, title: 'ToolScope' })
export type ToolScope = Static<typeof ToolScope>

/** A registered tool: one MCP server, the rules of its use, and how it is doing. */
export const Tool = Type.Object({
  name: Type.String({ description: '`ToolCall.tool`' }),
  transport: Type.Union([Type.Literal('stdio'), Type.Literal('streamable_http')]),
  status: ToolStatus,
  error: Type.Optional(Type.String({ description: 'why it is `failed`' })),
  agents: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'the agents that may use it (manifest names); null: every agent' }),
  actions: Type.Array(ToolAction),
  scope: ToolScope,
  timeout: Type.Integer({ minimum: 1, description: 'seconds: a call\'s timeout when the call gives none' }),
  retries: Type.Integer({ minimum: 0, description: 'retries of a call that failed in transport (a crashed server), when the call allows them' }),
  require_approval: Type.Optional(Type.Union([Type.Literal(true), Type.Array(Type.String())], {
    description: 'the calls that wait for a person\'s approval (an `approval` interrupt of the run showing the call) before the server sees them: true, every action; a list, those actions; absent, none'
  }))
}, { ...closed, title: 'Tool' })
export type Tool = Static<typeof Tool>

/** `GET /v1/tools`. */
export const ToolList = Type.Object({ tools: Type.Array(Tool) }, { ...closed, title: 'ToolList' })
export type ToolList = Static<typeof ToolList>

/** `GET /v1/tools` query. */
export const ToolListQuery = Type.Object({
  start: Type.Boolean({ default: false, description: 'start the servers not running yet, so that every tool\'s actions are listed with their descriptions and input schemas (needs the scope `admin`)' })
})
export type ToolListQuery = Static<typeof ToolListQuery>
