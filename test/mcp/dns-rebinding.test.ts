import t from 'tap'
import { rebindingGuard, rebindingRefusal } from '../../src/mcp/dns-rebinding.js'

t.test('bound to loopback: only loopback names and the hosts of CORS_ORIGINS; an Origin must be the request\'s own or listed', async (t) => {
  const guard = rebindingGuard('127.0.0.1', true, ['https://app.example.com'])
  for (const host of ['localhost:3000', '127.0.0.1:3000', '[::1]:3000', 'LOCALHOST:3000', 'app.example.com']) t.equal(rebindingRefusal(guard, host, undefined), undefined, `Host ${host}`)
  for (const host of [undefined, 'attacker.example:3000', '127.0.0.2:3000', 'a b']) t.match(rebindingRefusal(guard, host, undefined), /^Host ".*" is not a name of this server$/, `Host ${String(host)}`)
  t.equal(rebindingRefusal(guard, 'localhost:3000', 'http://localhost:3000'), undefined, 'its own origin')
  t.equal(rebindingRefusal(guard, 'localhost:3000', 'https://app.example.com'), undefined, 'a listed origin')
  for (const origin of ['http://localhost:5173', 'http://attacker.example', 'null']) t.match(rebindingRefusal(guard, 'localhost:3000', origin), /^Origin ".*" may not call this server/, `Origin ${origin}`)
})

t.test('bound to another loopback address or ::1: that address is a name of the server too', async (t) => {
  t.equal(rebindingRefusal(rebindingGuard('127.0.0.2', true, []), '127.0.0.2:3000', undefined), undefined)
  t.equal(rebindingRefusal(rebindingGuard('::1', true, []), '[::1]:3000', undefined), undefined)
})

t.test('bound elsewhere: any Host (authentication guards it), but still no foreign Origin unless CORS_ORIGINS is *', async (t) => {
  const guard = rebindingGuard('0.0.0.0', false, [])
  t.equal(rebindingRefusal(guard, 'agents.example.com', undefined), undefined)
  t.equal(rebindingRefusal(guard, undefined, undefined), undefined)
  t.equal(rebindingRefusal(guard, 'agents.example.com', 'https://agents.example.com'), undefined, 'its own origin')
  t.match(rebindingRefusal(guard, 'agents.example.com', 'https://attacker.example'), /^Origin/)
  t.match(rebindingRefusal(guard, undefined, 'https://attacker.example'), /^Origin/)
  t.equal(rebindingRefusal(rebindingGuard('0.0.0.0', false, ['*']), 'agents.example.com', 'https://anyone.example'), undefined, 'CORS_ORIGINS=*')
})
