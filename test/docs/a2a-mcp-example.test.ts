import t from 'tap'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'
import { startServer } from '../server-child.js'
import { tempDataDir } from '../helper.js'
import { docBlocks } from './doc-blocks.js'

// The example of both ways out of the host (docs/mcp.md), run as written against a server started with
// the example's files as they are (only the curl's port changes).

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

t.test('the A2A and MCP example of docs/mcp.md: file-digest reads a doc through the fs tool and has digest summarize it over A2A', { timeout: 120_000 }, async (t) => {
  const [start, call] = docBlocks('docs/mcp.md', '### Example: a file read through a tool, summarized by another agent')
  t.match(start, /MCP_SERVERS_FILE=examples\/mcp-servers\.json A2A_AGENTS_FILE=examples\/a2a-agents\.json npm start/, 'the server is started with the example\'s two files')
  const dir = tempDataDir(t)
  // the example's file as it is: its card URL names this server's own port, whatever PORT is (a
  // port this test is given first, as a reader's server keeps the one it starts on)
  const probe = createServer().listen(0, '127.0.0.1')
  await once(probe, 'listening')
  const port = (probe.address() as AddressInfo).port
  await new Promise((resolve) => probe.close(resolve))
  const again = await startServer(t, { DATA_DIR: join(dir, 'data'), WORKERS_PER_TYPE: '0', MCP_SERVERS_FILE: join(ROOT, 'examples/mcp-servers.json'), A2A_AGENTS_FILE: join(ROOT, 'examples/a2a-agents.json'), PORT: String(port) })
  const run = async (script: string): Promise<string> => await new Promise((resolve, reject) => {
    execFile('bash', ['-euo', 'pipefail', '-c', script.replaceAll('http://127.0.0.1:3000', again.url)], { cwd: ROOT, env: harnessFreeEnv(), timeout: 60_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
  const answer = JSON.parse(await run(call as string)) as { output: { path: string, characters: number, summary: string, summarizer: { status: string } } }
  const doc = readFileSync(join(ROOT, 'docs/mcp.md'), 'utf8')
  t.equal(answer.output.path, 'mcp.md')
  t.equal(answer.output.characters, doc.length, 'the whole file, read through the tool')
  // digest keeps a text's first sentences: the page's first paragraph, after its title
  t.equal(answer.output.summary.slice(0, 60), doc.split('\n\n')[1]?.replaceAll('\n', ' ').slice(0, 60), 'summarized by the other agent')
  t.equal(answer.output.summarizer.status, 'success')
  const tools = await (await fetch(`${again.url}/v1/tools`)).json() as { tools: Array<{ name: string, status: string }> }
  t.match(tools.tools, [{ name: 'fs', status: 'running' }])
  const audit = await (await fetch(`${again.url}/v1/audit?limit=100`)).json() as { rows: Array<{ action: string }> }
  t.ok(audit.rows.some((r) => r.action === 'tool.call') && audit.rows.some((r) => r.action === 'a2a.call'), 'both calls audited')
  const outside = await run((call as string).replace('"mcp.md"', '"../package.json"').replace('99999999-9999-4999-8999-999999999999', '99999999-9999-4999-8999-999999999998'))
  t.match(outside, /scope_violation/, 'a path out of the scope is refused')
})
