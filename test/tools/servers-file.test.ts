import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadToolServers } from '../../src/tools/servers-file.js'
import { build, tempDataDir } from '../helper.js'
import { NO_COVERAGE, ref, serversFile, tempDir } from '../fixtures/tools/servers.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** The message loading `servers` throws (fails the test when it loads). */
function problems (t: Test, servers: unknown, env: Record<string, string> = {}): string {
  const file = join(tempDir(t), 'servers.json')
  writeFileSync(file, JSON.stringify(servers))
  try {
    loadToolServers(file, env)
  } catch (err) {
    t.equal((err as { code?: string }).code, 'AH_ERR_CONFIG_INVALID')
    return (err as Error).message
  }
  t.fail('the file was accepted')
  return ''
}

t.test('no file, no tools', async (t) => {
  t.same(loadToolServers('', {}), [])
  t.same((await build(t)).tools.names(), [], 'MCP_SERVERS_FILE defaults to empty')
})

t.test('a valid file: both transports, aliases, defaults, references to the environment, paths from the file\'s folder', async (t) => {
  const file = serversFile(t, {
    fs: {
      command: 'mcp-server-filesystem',
      args: ['.'],
      env: { TOKEN: `Bearer ${ref('FS_TOKEN')}`, PLAIN: 'x' },
      cwd: 'work',
      agents: ['tool-user'],
      actions: { read: 'read_text_file', list: 'list_directory' },
      timeout: 5,
      retries: 0,
      startup_timeout: 9,
      scope: { root: 'repo', paths: ['packages/**'], path_arguments: ['path'] }
    },
    git: {
      url: 'https://git.example.com/mcp',
      headers: { Authorization: `Bearer ${ref('GIT_TOKEN')}` },
      actions: ['git_status', 'git_create_branch'],
      scope: { branch_pattern: 'tdev/auto/*' }
    }
  })
  mkdirSync(join(dirname(file), 'repo'))
  const [fs, git] = loadToolServers(file, { FS_TOKEN: 'fs-secret', GIT_TOKEN: 'git-secret' })
  t.match(fs, {
    name: 'fs',
    transport: { kind: 'stdio', command: 'mcp-server-filesystem', args: ['.'], env: { TOKEN: 'Bearer fs-secret', PLAIN: 'x' }, cwd: join(dirname(file), 'work') },
    agents: ['tool-user'],
    timeoutS: 5,
    retries: 0,
    startupTimeoutS: 9,
    paths: { root: join(dirname(file), 'repo'), patterns: ['packages/**'], arguments: ['path'] }
  })
  t.same([...(fs?.actions ?? [])], [['read', 'read_text_file'], ['list', 'list_directory']], 'an object of action → tool name')
  t.match(git, {
    name: 'git',
    transport: { kind: 'streamable_http', headers: { Authorization: 'Bearer git-secret' } },
    timeoutS: 30,
    retries: 1,
    startupTimeoutS: 30,
    branches: { pattern: 'tdev/auto/*', arguments: ['branch'] }
  }, 'the defaults: 30 s, one retry, a branch argument named branch')
  t.equal(String(git?.transport.kind === 'streamable_http' ? git.transport.url : ''), 'https://git.example.com/mcp')
  t.same([...(git?.actions ?? [])], [['git_status', 'git_status'], ['git_create_branch', 'git_create_branch']], 'a list: each action is the tool of that name')
  t.equal(git?.agents, undefined, 'no agents list: every agent')
  const app = await build(t, { MCP_SERVERS_FILE: file, FS_TOKEN: 'a', GIT_TOKEN: 'b' })
  t.same(app.tools.names(), ['fs', 'git'], 'the server reads it, with the environment its settings came from')
})

t.test('a bad file stops loading with one line per problem, each naming its place in the file', async (t) => {
  const message = problems(t, {
    mcpServers: {
      'bad.name': { command: 'x', actions: ['a'] },
      both: { command: 'x', url: 'http://localhost/mcp', actions: ['a'] },
      neither: { actions: ['a'] },
      ftp: { url: 'ftp://example.com', actions: ['a'] },
      mixed: { url: 'http://localhost/mcp', args: ['x'], env: { A: 'b' }, actions: ['a'] },
      stdio: { command: 'x', headers: { A: 'b' }, env: { 'NOT-A-NAME': 'x', SECRET: ref('MISSING'), ODD: ref('not a name') }, actions: ['a'] },
      scoped: { command: 'x', actions: ['a'], scope: { root: 'nowhere', paths: ['/abs/**', 'a/../b'] } },
      half: { command: 'x', actions: ['a'], scope: { paths: ['a/**'] } },
      rootless: { command: 'x', actions: ['a'], scope: { root: '.' } },
      filed: { command: 'x', actions: ['a'], scope: { root: 'servers.json', paths: ['**'] } },
      branchless: { command: 'x', actions: ['a'], scope: { branch_arguments: ['branch'] } }
    }
  })
  t.match(message, /^Invalid configuration: env\/MCP_SERVERS_FILE \(.*servers\.json\) is not a valid MCP servers file:\n {2}/)
  const lines = message.split('\n').slice(1).map((l) => l.trim())
  for (const expected of [
    /^\/mcpServers\/bad\.name: the tool name must be 1 to 64 letters, digits, _ or -/,
    /^\/mcpServers\/both: give either command \(a server started over stdio\) or url \(a Streamable HTTP server\), not both or neither$/,
    /^\/mcpServers\/neither: give either command/,
    /^\/mcpServers\/ftp\/url: ftp:\/\/example\.com must be an http:\/\/ or https:\/\/ URL$/,
    /^\/mcpServers\/mixed\/args: only a command server takes args$/,
    /^\/mcpServers\/mixed\/env: only a command server takes env$/,
    /^\/mcpServers\/stdio\/headers: only a url server takes headers$/,
    /^\/mcpServers\/stdio\/env\/NOT-A-NAME: not a variable name/,
    /^\/mcpServers\/stdio\/env\/SECRET: \$\{MISSING\} names a variable that is not set in the server's environment$/,
    /^\/mcpServers\/stdio\/env\/ODD: \$\{not a name\} is not a variable reference/,
    /^\/mcpServers\/scoped\/scope\/paths\/0: \/abs\/\*\* must be relative to root, without \.\.$/,
    /^\/mcpServers\/scoped\/scope\/paths\/1: a\/\.\.\/b must be relative to root, without \.\.$/,
    /^\/mcpServers\/scoped\/scope\/root: .*nowhere cannot be used: ENOENT/,
    /^\/mcpServers\/half\/scope: a path scope needs both root \(a folder\) and paths/,
    /^\/mcpServers\/rootless\/scope: root without paths/,
    /^\/mcpServers\/filed\/scope\/root: .*servers\.json is not a folder$/,
    /^\/mcpServers\/branchless\/scope: branch_arguments without branch_pattern$/
  ]) t.ok(lines.some((l) => expected.test(l)), `a line matches ${String(expected)}`)
  t.equal(lines.length, 17, 'one line per problem, nothing else')
})

t.test('a file that breaks the schema: each place once, with the allowed values', async (t) => {
  const message = problems(t, {
    mcpServers: {
      fs: { command: 'x', actions: [], timeout: 0, retries: 9, scopes: {} },
      git: { url: 'http://localhost/mcp', actions: { read: 7 } },
      none: { command: 'x' }
    },
    extra: true
  })
  const lines = message.split('\n').slice(1).map((l) => l.trim())
  t.same(lines.sort(), [
    '/extra must NOT have additional properties',
    '/mcpServers/fs/actions must be a list of the server\'s tool names (["read_text_file", ...]), or an object of action → tool name ({"read": "read_text_file", ...}), each name 1 to 128 characters',
    '/mcpServers/fs/retries must be <= 5',
    '/mcpServers/fs/scopes must NOT have additional properties',
    '/mcpServers/fs/timeout must be >= 1',
    '/mcpServers/git/actions must be a list of the server\'s tool names (["read_text_file", ...]), or an object of action → tool name ({"read": "read_text_file", ...}), each name 1 to 128 characters',
    '/mcpServers/none/actions is required'
  ].sort())
})

t.test('a file that cannot be read, or is not JSON, says so', async (t) => {
  t.throws(() => loadToolServers(join(tempDir(t), 'missing.json'), {}), { code: 'AH_ERR_CONFIG_INVALID', message: /missing\.json\) is not a valid MCP servers file:\n {2}it cannot be read: ENOENT/ })
  const file = join(tempDir(t), 'servers.json')
  writeFileSync(file, '{ "mcpServers": ')
  t.throws(() => loadToolServers(file, {}), { message: /\n {2}it is not JSON: / })
  await t.rejects(build(t, { MCP_SERVERS_FILE: file }), { code: 'AH_ERR_CONFIG_INVALID', message: /MCP_SERVERS_FILE/ }, 'at boot')
})

t.test('the server refuses to boot on a bad servers file, with a readable message and exit code 1', async (t) => {
  const file = serversFile(t, { fs: { command: 'x', actions: ['read_text_file'], scope: { root: 'nowhere', paths: ['**'] } } })
  const child = spawn(process.execPath, [...process.execArgv, 'src/server.ts'], {
    cwd: ROOT,
    // the child writes no coverage: it stops while booting, and its counts would hide this suite's
    env: { ...process.env, LOG_LEVEL: 'silent', DATA_DIR: tempDataDir(t), MCP_SERVERS_FILE: file, ...NO_COVERAGE },
    stdio: ['ignore', 'ignore', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const [code] = await once(child, 'exit') as [number | null]
  t.equal(code, 1)
  t.match(stderr, /^agent-host: cannot start: Invalid configuration: env\/MCP_SERVERS_FILE \(.*\) is not a valid MCP servers file:\n {2}\/mcpServers\/fs\/scope\/root: .*nowhere cannot be used/)
})

t.test('an oauth entry: its secrets from the environment or from files beside the servers file (trimmed), the rest as written', async (t) => {
  const file = serversFile(t, {
    cc: {
      url: 'https://tickets.example.com/mcp',
      headers: { 'X-Tenant': 'a' },
      oauth: { grant: 'client_credentials', client_id: 'host', client_secret: ref('CC_SECRET'), scope: 'a b', authorization_server: 'https://login.example.com/', resource: 'https://tickets.example.com/' },
      actions: ['search']
    },
    filed: { url: 'https://tickets.example.com/mcp', oauth: { grant: 'client_credentials', client_id: ref('CC_ID'), client_secret_file: 'secrets/cc' }, actions: ['search'] },
    public: { url: 'https://crm.example.com/mcp', oauth: { grant: 'refresh_token', client_id: 'crm', refresh_token_file: 'secrets/rt' }, actions: ['find'] },
    confidential: { url: 'https://crm.example.com/mcp', oauth: { grant: 'refresh_token', client_id: 'crm', client_secret_file: 'secrets/cc', refresh_token: ref('RT') }, actions: ['find'] }
  })
  mkdirSync(join(dirname(file), 'secrets'))
  writeFileSync(join(dirname(file), 'secrets/cc'), '  file-secret\n')
  writeFileSync(join(dirname(file), 'secrets/rt'), 'file-refresh\n')
  const [cc, filed, pub, confidential] = loadToolServers(file, { CC_SECRET: 'env-secret', CC_ID: 'host-2', RT: 'env-refresh' })
  t.match(cc?.transport, {
    kind: 'streamable_http',
    headers: { 'X-Tenant': 'a' },
    oauth: { grant: 'client_credentials', clientId: 'host', clientSecret: 'env-secret', scope: 'a b', authorizationServer: 'https://login.example.com/', resource: new URL('https://tickets.example.com/') }
  })
  t.same(filed?.transport.kind === 'streamable_http' ? filed.transport.oauth : undefined, { grant: 'client_credentials', clientId: 'host-2', clientSecret: 'file-secret' }, 'a file\'s secret, trimmed; a client id may name a variable')
  t.same(pub?.transport.kind === 'streamable_http' ? pub.transport.oauth : undefined, { grant: 'refresh_token', clientId: 'crm', refreshToken: 'file-refresh' }, 'a public client: no secret')
  t.same(confidential?.transport.kind === 'streamable_http' ? confidential.transport.oauth : undefined, { grant: 'refresh_token', clientId: 'crm', clientSecret: 'file-secret', refreshToken: 'env-refresh' })
})

t.test('a bad oauth entry stops loading: a secret written in the file, oauth on a stdio server, a secret file missing or empty, a grant without its secret, an Authorization header beside it', async (t) => {
  const dir = tempDir(t)
  const file = join(dir, 'servers.json')
  writeFileSync(join(dir, 'empty'), '\n')
  const url = 'https://tools.example.com/mcp'
  const cc = (oauth: Record<string, unknown>): Record<string, unknown> => ({ url, oauth: { grant: 'client_credentials', client_id: 'c', ...oauth }, actions: ['a'] })
  writeFileSync(file, JSON.stringify({
    mcpServers: {
      literal: cc({ client_secret: 'hunter2-literal' }),
      mixed: cc({ client_secret: `x-${ref('SECRET')}` }),
      stdio: { command: 'x', oauth: { grant: 'client_credentials', client_id: 'c', client_secret: ref('SECRET') }, actions: ['a'] },
      missing: cc({ client_secret_file: 'nowhere' }),
      empty: cc({ client_secret_file: 'empty' }),
      unset: cc({ client_secret: ref('UNSET') }),
      blank: cc({ client_secret: ref('BLANK') }),
      both: cc({ client_secret: ref('SECRET'), client_secret_file: 'empty' }),
      nosecret: cc({}),
      refreshing: cc({ client_secret: ref('SECRET'), refresh_token: ref('SECRET') }),
      norefresh: { url, oauth: { grant: 'refresh_token', client_id: 'c' }, actions: ['a'] },
      literalrefresh: { url, oauth: { grant: 'refresh_token', client_id: 'c', refresh_token: 'rt-literal' }, actions: ['a'] },
      header: { ...cc({ client_secret: ref('SECRET') }), headers: { authorization: 'Bearer x' } },
      urls: cc({ client_secret: ref('SECRET'), resource: 'urn:x', authorization_server: 'ftp://as' })
    }
  }))
  let message = ''
  try {
    loadToolServers(file, { SECRET: 's', BLANK: '' })
  } catch (err) {
    t.equal((err as { code?: string }).code, 'AH_ERR_CONFIG_INVALID')
    message = (err as Error).message
  }
  const lines = message.split('\n').slice(1).map((l) => l.trim())
  const secretLine = /a secret is not written in the servers file: give \$\{NAME\} \(the host's variable NAME holds it\) or client_secret_file$/
  for (const expected of [
    new RegExp(`^/mcpServers/literal/oauth/client_secret: ${secretLine.source}`),
    new RegExp(`^/mcpServers/mixed/oauth/client_secret: ${secretLine.source}`),
    /^\/mcpServers\/stdio\/oauth: only a url server takes oauth/,
    /^\/mcpServers\/missing\/oauth\/client_secret_file: .*nowhere cannot be read: ENOENT/,
    /^\/mcpServers\/empty\/oauth\/client_secret_file: .*empty is empty$/,
    /^\/mcpServers\/unset\/oauth\/client_secret: \$\{UNSET\} names a variable that is not set/,
    /^\/mcpServers\/blank\/oauth\/client_secret: \$\{BLANK\} is set but empty$/,
    /^\/mcpServers\/both\/oauth: give client_secret or client_secret_file, not both$/,
    /^\/mcpServers\/nosecret\/oauth: the client_credentials grant needs client_secret \(\$\{NAME\}\) or client_secret_file$/,
    /^\/mcpServers\/refreshing\/oauth\/refresh_token: only the refresh_token grant takes a refresh token$/,
    /^\/mcpServers\/norefresh\/oauth: the refresh_token grant needs refresh_token \(\$\{NAME\}\) or refresh_token_file$/,
    /^\/mcpServers\/literalrefresh\/oauth\/refresh_token: a secret is not written in the servers file: give \$\{NAME\} .* or refresh_token_file$/,
    /^\/mcpServers\/header\/headers\/authorization: a server with oauth gets its Authorization from its access token$/,
    /^\/mcpServers\/urls\/oauth\/resource: urn:x must be an http:\/\/ or https:\/\/ URL$/,
    /^\/mcpServers\/urls\/oauth\/authorization_server: ftp:\/\/as must be an http:\/\/ or https:\/\/ URL$/
  ]) t.ok(lines.some((l) => expected.test(l)), `a line matches ${String(expected)}`)
  t.equal(lines.length, 15, 'one line per problem, nothing else')
  t.notMatch(message, /hunter2-literal|rt-literal/, 'the message does not repeat a secret written in the file')
})

t.test('an oauth block that breaks the schema: the grants allowed, its keys', async (t) => {
  const message = problems(t, { mcpServers: { x: { url: 'https://a.example/mcp', oauth: { grant: 'password', client_id: 'c', secret: 'x' }, actions: ['a'] } } })
  const lines = message.split('\n').slice(1).map((l) => l.trim())
  t.same(lines.sort(), [
    '/mcpServers/x/oauth/grant must be client_credentials (the client\'s own id and secret) or refresh_token (a refresh token the client was given)',
    '/mcpServers/x/oauth/secret must NOT have additional properties'
  ])
})
