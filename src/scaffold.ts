import { randomUUID } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { isAbsolute, join, relative, resolve, sep } from 'node:path'
import { CONTRACT_VERSION } from './agents/contract-version.js'
import { AGENT_TEMPLATES, TEST_TEMPLATES, type AgentStyle, type TemplateValues } from './scaffold-templates.js'

/** Lower-case kebab case: a letter, then letters, digits and single hyphens. */
const NAME = /^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$/
const NAME_MAX = 64

const USAGE = 'usage: agent-host new agent NAME [--stream | --task | --contract]'

/** What `new agent` makes, for its closing message. */
const MADE: Record<AgentStyle, string> = {
  json: 'a JSON agent (request_response)',
  stream: 'an SSE agent (server_sent_events)',
  task: 'a task agent',
  contract: 'a contract agent (seed 003), also a task agent'
}

/** The flags of `new agent`. */
export interface NewAgentFlags {
  stream?: boolean
  task?: boolean
  contract?: boolean
}

/** Where `new agent` writes, and who the manifest names as the author. */
export interface NewAgentPlace {
  /** The project's root: the current directory, holding `src/` and `test/`. */
  root: string
  /** The environment: `AGENTS_DIR` (relative to `root`; unset or empty means `agents/`) and `USER`, the author. */
  env: Record<string, string | undefined>
}

/** The style the flags ask for, or why they contradict each other. */
function styleOf (flags: NewAgentFlags): { style: AgentStyle } | { refused: string } {
  if (flags.stream === true && flags.contract === true) return { refused: '--contract and --stream do not combine: a contract agent answers with one AgentOutput (request_response), it cannot stream' }
  if (flags.stream === true && flags.task === true) return { refused: '--task and --stream do not combine: a task agent answers the task graph, not a client, so it has nothing to stream' }
  // every contract agent works the task graph too, so --contract --task is --contract
  if (flags.contract === true) return { style: 'contract' }
  if (flags.task === true) return { style: 'task' }
  return { style: flags.stream === true ? 'stream' : 'json' }
}

/** A path relative to `from`, with forward slashes (an import specifier or a URL). */
const specifier = (from: string, to: string): string => relative(from, to).split(sep).join('/')

/** The project's npm scripts (none when its package.json cannot be read). */
function scriptsOf (root: string): Record<string, string> {
  try {
    return (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts?: Record<string, string> }).scripts ?? {}
  } catch {
    return {}
  }
}

/** The one-line curl that calls the new agent on a server started here (`base`: its address, with this shell's PORT). */
function curlOf (style: AgentStyle, name: string, id: string, base: string): string[] {
  if (style === 'task') {
    return [
      `curl -s ${base}/v1/tasks -H 'content-type: application/json' -d '${JSON.stringify({ id: `${name}-1`, type: name, inputs: { numbers: [4, 1, 7] } })}'`,
      `curl -s ${base}/v1/tasks/${name}-1`
    ]
  }
  const session = randomUUID()
  const payload = { json: { name: 'Ada' }, stream: { text: 'streams reverse words these' }, contract: { text: 'Small agents are easy to test. Start here!' } }[style]
  const envelope = {
    request_id: randomUUID(),
    context: {
      session_id: session,
      agent_id: id,
      user: { user_id: 'ada', tier: 'free', locale: 'en-GB' },
      trace: { trace_id: randomUUID(), span_id: randomUUID() },
      permissions: [],
      created_at: new Date().toISOString()
    },
    payload: { session_id: session, payload }
  }
  return [`curl -s${style === 'stream' ? 'N' : ''} ${base}/v1/assist -H 'content-type: application/json' -d '${JSON.stringify(envelope)}'`]
}

/**
 * `agent-host new agent NAME [--stream | --task | --contract]`: writes a working agent of that
 * style to `<AGENTS_DIR>/NAME/index.ts` and its test to `test/agents/NAME.test.ts`, then prints what
 * it made and the next steps. A JSON agent by default; `--stream` an SSE agent, `--task` a task
 * agent, `--contract` a contract agent (which works the task graph too, so `--task` may go with it).
 *
 * The project is `place.root` (the current directory): it must hold `src/agents/index.ts`. The agent
 * goes into AGENTS_DIR when it is set (a folder inside the project; the generated code imports the
 * project's `src/` by relative path), else into `agents/`; the test always goes into `test/agents/`
 * and loads the agents of the folder the agent is in. Nothing is ever overwritten.
 * @param args what follows `new`: `agent` and the name
 * @returns the exit code: 0 made, 1 the agent or its test is already there, 2 a usage error
 */
export async function newAgent (args: string[], flags: NewAgentFlags, place: NewAgentPlace, io: { out: (line: string) => void, err: (line: string) => void }): Promise<number> {
  const [what, name, ...rest] = args
  if (what !== 'agent' || name === undefined || rest.length > 0) { io.err(USAGE); return 2 }
  const chosen = styleOf(flags)
  if ('refused' in chosen) { io.err(`${chosen.refused}\n${USAGE}`); return 2 }
  const { style } = chosen
  if (!NAME.test(name) || name.length > NAME_MAX) {
    io.err(`agent name "${name}" must be lower-case kebab case: a letter, then letters, digits and single hyphens, at most ${NAME_MAX} characters (like "word-counter"); it names the agent, its folder, its test and its task type`)
    return 2
  }
  const root = resolve(place.root)
  if (!existsSync(join(root, 'src', 'agents', 'index.ts'))) {
    io.err(`${root} is not the root of an agent-host project (it has no src/agents/index.ts): run agent-host new from there`)
    return 2
  }
  const agents = resolve(root, place.env.AGENTS_DIR || 'agents')
  const inside = relative(root, agents)
  if (inside.startsWith('..') || isAbsolute(inside)) {
    io.err(`AGENTS_DIR is ${agents}, outside this project (${root}): a new agent is TypeScript that imports the project's src/ and is tested and built from inside it. Unset AGENTS_DIR (or point it inside the project) for agent-host new, and deploy the built agent (npm run build) to ${agents}`)
    return 2
  }
  const agentDir = join(agents, name)
  const testDir = join(root, 'test', 'agents')
  const agentFile = join(agentDir, 'index.ts')
  const testFile = join(testDir, `${name}.test.ts`)
  const taken = [agentDir, testFile].filter((path) => existsSync(path))
  if (taken.length > 0) {
    io.err(`${taken.map((path) => relative(root, path)).join(' and ')} already there: agent-host new never overwrites (pick another name, or remove ${taken.length === 1 ? 'it' : 'them'} first)`)
    return 1
  }
  const values: TemplateValues = {
    name,
    id: randomUUID(),
    author: place.env.USER || 'me',
    createdAt: new Date().toISOString(),
    contractVersion: CONTRACT_VERSION,
    authoring: specifier(agentDir, join(root, 'src', 'agents', 'index.js')),
    helpers: `${specifier(testDir, join(root, 'test'))}/`,
    agentsFolder: `${specifier(testDir, agents)}/`
  }
  await mkdir(agentDir, { recursive: true })
  await mkdir(testDir, { recursive: true })
  // 'wx': fail rather than overwrite a file made since the check above
  await writeFile(agentFile, AGENT_TEMPLATES[style](values), { flag: 'wx' })
  await writeFile(testFile, TEST_TEMPLATES[style](values), { flag: 'wx' })

  // the port the server started from this shell listens on (the default unless PORT says otherwise)
  const port = /^\d{1,5}$/.test(place.env.PORT ?? '') && Number(place.env.PORT) > 0 && Number(place.env.PORT) <= 65535 ? Number(place.env.PORT) : 3000
  const base = `http://127.0.0.1:${port}`
  const serve = scriptsOf(root).dev !== undefined ? 'npm run dev' : 'npx tsx src/server.ts'
  const test = relative(root, testFile).split(sep).join('/')
  io.out(`made ${MADE[style]}${style === 'task' ? ` of type "${name}"` : `, id ${values.id}`}:`)
  io.out(`  ${relative(root, agentFile)}`)
  io.out(`  ${relative(root, testFile)}`)
  if (agents !== join(root, 'agents')) io.out(`note: npm run build compiles only agents/, so npm start does not serve ${inside}/; ${serve} and the tests load it as TypeScript`)
  io.out('')
  io.out('next:')
  io.out('  # run its test (npm test runs it with the others, and gates the coverage of the whole project)')
  io.out(`  npx tap --disable-coverage ${test}`)
  io.out(`  # serve it on ${base} (with every agent of its folder)`)
  io.out(`  ${serve}`)
  io.out('  # call it, from another terminal')
  for (const line of curlOf(style, name, values.id, base)) io.out(`  ${line}`)
  io.out('')
  io.out('agents/README.md is the authors\' contract.')
  return 0
}
