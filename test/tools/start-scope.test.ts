import t from 'tap'
import { build } from '../helper.js'
import { checkErrorBody } from '../sse.js'
import { FIXTURE_SERVER, NO_COVERAGE, serversFile } from '../fixtures/tools/servers.js'

// Issue 27, fault 11: `GET /v1/tools?start=true` started every MCP server's process for any key
// holding agents:read. Listing still needs only agents:read; starting needs admin. (It starts one
// real fixture server, as the admin: that is what is being refused to the other key.)

t.test('issue 27, fault 11: a key with only agents:read lists the tools but may not start their servers (it did); an admin may', async (t) => {
  const app = await build(t, {
    AUTH_MODE: 'apikey',
    WORKERS_PER_TYPE: '0',
    MCP_SERVERS_FILE: serversFile(t, { fx: { command: process.execPath, args: [FIXTURE_SERVER], env: NO_COVERAGE, actions: ['pid'] } })
  })
  const reader = await app.keys.create({ name: 'reader', scopes: ['agents:read'] })
  const writer = await app.keys.create({ name: 'writer', scopes: ['agents:read', 'tasks:write', 'assist:invoke', 'bus:publish'] })
  const admin = await app.keys.create({ name: 'root', scopes: ['admin'] })
  const get = async (url: string, key: string): Promise<{ statusCode: number, json: () => any }> => await app.inject({ url, headers: { authorization: `Bearer ${key}` } })

  const listed = await get('/v1/tools', reader.key)
  t.equal(listed.statusCode, 200, 'listing needs only agents:read')
  t.match(listed.json().tools, [{ name: 'fx', status: 'not_started' }])
  t.equal((await get('/v1/tools?start=false', reader.key)).statusCode, 200)

  for (const [who, key] of [['agents:read', reader.key], ['every write scope but admin', writer.key]] as const) {
    const refused = await get('/v1/tools?start=true', key)
    t.equal(refused.statusCode, 403, `${who}: start=true is refused`)
    t.match(checkErrorBody(refused.json()), { code: 'AH_ERR_FORBIDDEN', message: /scope "admin"/ }, who)
  }
  t.match((await get('/v1/tools', reader.key)).json().tools, [{ name: 'fx', status: 'not_started' }], 'no server was started')
  const rows = await app.audit.list({ action: 'auth.deny', resource: 'GET /v1/tools', limit: 10 })
  t.equal(rows.length, 2, 'each refusal is audited')
  t.match(rows[0], { actor: reader.record.id, success: false, details: { reason: 'scope', scope: 'admin', name: 'reader' } })

  const started = await get('/v1/tools?start=true', admin.key)
  t.equal(started.statusCode, 200)
  t.match(started.json().tools, [{ name: 'fx', status: 'running' }], 'an admin starts them')
})
