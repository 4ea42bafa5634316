import t from 'tap'
import { isUuid, uuidOf } from '../../src/protocol/foreign-ids.js'

t.test('another protocol\'s id is itself when a UUID, else the same UUID every time, one per kind', async (t) => {
  t.ok(isUuid('0C6F4E2A-9B1D-4F3E-8A57-2D9E6B1C4A01'))
  t.notOk(isUuid('0c6f4e2a9b1d4f3e8a572d9e6b1c4a01'))
  t.equal(uuidOf('chat', '0C6F4E2A-9B1D-4F3E-8A57-2D9E6B1C4A01'), '0c6f4e2a-9b1d-4f3e-8a57-2d9e6b1c4a01', 'a UUID stays itself, lower-cased')
  // the request ids of A2A messages stored before this function existed must not change
  t.equal(uuidOf('a2a-message', 'msg-1'), 'eb0d8906-b4dc-578e-8311-0ecf0f9c3b0f')
  const chat = uuidOf('chat', 'Xa3kP0qLm9TzR2vB')
  t.ok(isUuid(chat))
  t.match(chat, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'shaped as a version-5 UUID')
  t.equal(uuidOf('chat', 'Xa3kP0qLm9TzR2vB'), chat, 'the same every time')
  t.not(uuidOf('message', 'Xa3kP0qLm9TzR2vB'), chat, 'another kind, another UUID')
})
