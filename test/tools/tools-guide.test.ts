import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadToolServers } from '../../src/tools/servers-file.js'
import { harnessFreeEnv } from '../child-env.js'
import { docSection } from '../docs/doc-blocks.js'
import { tempDataDir } from '../helper.js'
import { startServer } from '../server-child.js'
import { tempDir } from '../fixtures/tools/servers.js'

// The "MCP tools for agents" section of docs/mcp.md, run as written (only its /tmp paths and the port
// change): the example servers file is valid, and the server it names starts and lists its actions.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function section (): string {
  return docSection('docs/mcp.md', '### MCP tools for agents')
}

t.test('the guide\'s example servers file is valid', async (t) => {
  const [json] = [...section().matchAll(/```json\n([\s\S]*?)```/g)].map((m) => m[1] as string)
  const dir = tempDir(t)
  const file = join(dir, 'servers.json')
  mkdirSync(join(dir, 'repo'))
  writeFileSync(file, (json as string).replaceAll('/srv/repo', join(dir, 'repo')))
  t.same(loadToolServers(file, { GIT_MCP_TOKEN: 'x' }).map((s) => s.name), ['fs', 'git'])
})

t.test('the guide\'s MCP tools section works as written: a servers file, the server started with it, GET /v1/tools?start=true', { timeout: 120_000 }, async (t) => {
  const dir = tempDir(t)
  const paths = (script: string): string => script.replaceAll('/tmp/repo', join(dir, 'repo')).replaceAll('/tmp/mcp-servers.json', join(dir, 'mcp-servers.json'))
  const [setup, curl] = [...section().matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] as string)
  t.ok(setup !== undefined && curl !== undefined, 'two shell blocks')
  t.match(section(), /Start the server with `MCP_SERVERS_FILE=\/tmp\/mcp-servers\.json npm run dev`/)
  const run = async (script: string): Promise<string> => await new Promise((resolve, reject) => {
    execFile('bash', ['-euo', 'pipefail', '-c', script], { cwd: ROOT, env: harnessFreeEnv(), timeout: 60_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
  await run(paths(setup as string))
  const server = await startServer(t, { DATA_DIR: tempDataDir(t), WORKERS_PER_TYPE: '0', MCP_SERVERS_FILE: join(dir, 'mcp-servers.json') })
  const listed = JSON.parse(await run((curl as string).replaceAll('http://127.0.0.1:3000', server.url))) as { tools: unknown[] }
  t.match(listed.tools, [{
    name: 'fs',
    transport: 'stdio',
    status: 'running',
    actions: [{ name: 'read', tool: 'read_text_file', listed: true }, { name: 'list', tool: 'list_directory', listed: true }],
    scope: { root: join(dir, 'repo'), paths: ['packages/**'] }
  }])
})
