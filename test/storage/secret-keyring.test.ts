import t from 'tap'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadConfig } from '../../src/config.js'
import { DEFAULT_KEY_FILE, isSealed, loadSecretKeyring, sealedKeyId, SecretKeyring, secretKeyId } from '../../src/storage/secret-keyring.js'
import { tempDataDir } from '../helper.js'

const OLD = randomBytes(32)
const NEW = randomBytes(32)
const CONTEXT = 'a2a_push_configs.token:["run","cfg"]'

/** `sealed` with the byte at `index` of its part `part` (0: prefix, 1: kid, 2: iv, 3: ciphertext) flipped. */
function flipped (sealed: string, part: number, index = 0): string {
  const parts = sealed.split('.')
  const bytes = Buffer.from(parts[part] as string, 'base64url')
  bytes[index] = (bytes[index] as number) ^ 1
  parts[part] = bytes.toString('base64url')
  return parts.join('.')
}

/** A log that keeps what it was told. */
function recorder (): { log: { info: (obj: object, msg: string) => void }, lines: string[] } {
  const lines: string[] = []
  return { log: { info: (_obj, msg) => { lines.push(msg) } }, lines }
}

t.test('a value sealed with the current key opens for its context, and is a self-describing string that holds neither the text nor the key', async (t) => {
  const keyring = new SecretKeyring(NEW)
  const sealed = keyring.seal('the push token', CONTEXT)
  t.match(sealed, /^ahs1\.[0-9a-f]{16}\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+$/)
  t.equal(sealedKeyId(sealed), secretKeyId(NEW))
  t.equal(keyring.current?.id, secretKeyId(NEW))
  t.ok(isSealed(sealed))
  t.notOk(sealed.includes('the push token') || sealed.includes(NEW.toString('base64url')) || sealed.includes(NEW.toString('hex')))
  t.equal(keyring.open(sealed, CONTEXT), 'the push token')
  t.not(keyring.seal('the push token', CONTEXT), sealed, 'a fresh IV each time')
  t.equal(keyring.open(keyring.seal('', CONTEXT), CONTEXT), '', 'an empty text too')
  t.equal(keyring.open(keyring.seal('ünïcödé ✓', CONTEXT), CONTEXT), 'ünïcödé ✓')
})

t.test('the key id is a domain-separated fingerprint: not the key, not its plain hash', async (t) => {
  t.equal(secretKeyId(NEW), secretKeyId(Buffer.from(NEW)))
  t.not(secretKeyId(NEW), secretKeyId(OLD))
  t.notOk(NEW.toString('hex').includes(secretKeyId(NEW)))
})

t.test('a value changed anywhere, or opened for another place, is refused with an error naming its key', async (t) => {
  const keyring = new SecretKeyring(NEW, [OLD])
  const sealed = keyring.seal('the push token', CONTEXT)
  const kid = secretKeyId(NEW)
  t.throws(() => keyring.open(flipped(sealed, 3), CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE', message: new RegExp(`key ${kid}.*does not authenticate`) }, 'one byte of the ciphertext')
  t.throws(() => keyring.open(flipped(sealed, 3, Buffer.from(sealed.split('.')[3] as string, 'base64url').length - 1), CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE' }, 'one byte of the tag')
  t.throws(() => keyring.open(flipped(sealed, 2), CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE' }, 'one byte of the IV')
  t.throws(() => keyring.open(sealed, 'a2a_push_configs.token:["run","other"]'), { code: 'AH_ERR_SECRET_UNREADABLE', message: /sealed for another place/ }, 'another row\'s context')
  const otherKid = sealed.replace(`.${kid}.`, `.${secretKeyId(OLD)}.`)
  t.throws(() => keyring.open(otherKid, CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE', message: new RegExp(`key ${secretKeyId(OLD)}.*does not authenticate`) }, 'the kid of another held key')
  const unknown = sealed.replace(`.${kid}.`, '.0123456789abcdef.')
  t.throws(() => keyring.open(unknown, CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE', message: /key 0123456789abcdef .*does not hold: set it as SECRETS_KEY, or in SECRETS_KEYS_RETIRED/ }, 'a kid not held')
  t.throws(() => keyring.open('the push token', CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE', message: /not a sealed value/ }, 'a plain value never opens as itself')
  t.notOk(isSealed('the push token'))
  t.equal(sealedKeyId('the push token'), undefined)
})

t.test('retired keys open what they sealed; new values are sealed with the current key', async (t) => {
  const before = new SecretKeyring(OLD).seal('old token', CONTEXT)
  const keyring = new SecretKeyring(NEW, [OLD])
  t.equal(keyring.open(before, CONTEXT), 'old token')
  t.equal(sealedKeyId(keyring.seal('new token', CONTEXT)), secretKeyId(NEW))
  t.ok(keyring.holds(secretKeyId(OLD)) && keyring.holds(secretKeyId(NEW)))
  t.same(keyring.ids, [secretKeyId(OLD), secretKeyId(NEW)], 'the current one last')
  t.throws(() => new SecretKeyring(NEW).open(before, CONTEXT), { code: 'AH_ERR_SECRET_UNREADABLE' }, 'without the retired key it does not open')
})

t.test('without a current key nothing is sealed: never a plain-text fallback', async (t) => {
  const keyring = new SecretKeyring(undefined, [OLD])
  t.equal(keyring.current, undefined)
  t.throws(() => keyring.seal('token', CONTEXT), { code: 'AH_ERR_SECRETS_KEY_UNSET', statusCode: 503, message: /a2a_push_configs\.token cannot be stored sealed: set SECRETS_KEY or SECRETS_KEY_FILE/ })
  t.throws(() => new SecretKeyring(randomBytes(16)), /32 bytes/)
})

t.test('settings: SECRETS_KEY takes 32 bytes as base64, base64url or hex; anything else stops the boot saying how to make one', async (t) => {
  const dir = tempDataDir(t)
  for (const text of [NEW.toString('base64'), NEW.toString('base64url'), NEW.toString('hex'), NEW.toString('hex').toUpperCase()]) {
    const config = loadConfig({ DATA_DIR: dir, SECRETS_KEY: text })
    t.equal(loadSecretKeyring(config, { defaultFile: true, log: recorder().log }).current?.id, secretKeyId(NEW), text)
  }
  for (const bad of ['short', randomBytes(16).toString('base64'), randomBytes(48).toString('base64'), `${NEW.toString('hex')}00`, 'a'.repeat(64).replace(/^a/, 'g')]) {
    t.throws(() => loadConfig({ SECRETS_KEY: bad }), { code: 'AH_ERR_CONFIG_INVALID', message: /env\/SECRETS_KEY is not a key: .*openssl rand -base64 32/ }, bad)
  }
  t.throws(() => loadConfig({ SECRETS_KEY: NEW.toString('base64'), SECRETS_KEY_FILE: '/some/file' }), { code: 'AH_ERR_CONFIG_INVALID', message: /both set: set one of them/ })
  t.throws(() => loadConfig({ SECRETS_KEYS_RETIRED: `${OLD.toString('base64')}, nope` }), { code: 'AH_ERR_CONFIG_INVALID', message: /SECRETS_KEYS_RETIRED holds something that is not a key/ })
  const rotated = loadSecretKeyring(loadConfig({ DATA_DIR: dir, SECRETS_KEY: NEW.toString('base64'), SECRETS_KEYS_RETIRED: ` ${OLD.toString('hex')} ,` }), { defaultFile: true, log: recorder().log })
  t.same(rotated.ids, [secretKeyId(OLD), secretKeyId(NEW)])
  t.notOk(existsSync(join(dir, DEFAULT_KEY_FILE)), 'no key file made when a key is set')
})

t.test('SECRETS_KEY_FILE: the key it holds; a file that cannot be read or holds no key stops the boot', async (t) => {
  const dir = tempDataDir(t)
  const file = join(dir, 'mounted.key')
  writeFileSync(file, `\n${NEW.toString('base64')}\n`)
  t.equal(loadSecretKeyring(loadConfig({ DATA_DIR: dir, SECRETS_KEY_FILE: file }), { defaultFile: true, log: recorder().log }).current?.id, secretKeyId(NEW))
  t.throws(() => loadSecretKeyring(loadConfig({ DATA_DIR: dir, SECRETS_KEY_FILE: join(dir, 'missing.key') }), { defaultFile: false, log: recorder().log }), { code: 'AH_ERR_CONFIG_INVALID', message: /env\/SECRETS_KEY_FILE .*missing\.key cannot be read/ })
  writeFileSync(file, 'not a key\n')
  t.throws(() => loadSecretKeyring(loadConfig({ DATA_DIR: dir, SECRETS_KEY_FILE: file }), { defaultFile: false, log: recorder().log }), { code: 'AH_ERR_CONFIG_INVALID', message: /does not hold a secrets key: .*openssl rand -base64 32/ })
})

t.test('with no key set: on SQLite DATA_DIR/secrets.key is made when the first secret is sealed (mode 0600, said once) and used after; otherwise there is no key', async (t) => {
  const dir = tempDataDir(t)
  const config = loadConfig({ DATA_DIR: dir })
  const first = recorder()
  const keyring = loadSecretKeyring(config, { defaultFile: true, log: first.log })
  const file = join(dir, DEFAULT_KEY_FILE)
  t.equal(keyring.current, undefined, 'no key before one is needed')
  t.notOk(existsSync(file), 'and no file')
  const sealed = keyring.seal('token', CONTEXT)
  t.equal(statSync(file).mode & 0o777, 0o600)
  t.match(first.lines, [new RegExp(`^made the key that seals stored secrets .*${join(dir, DEFAULT_KEY_FILE)}.*SECRETS_KEY or SECRETS_KEY_FILE .*outside DATA_DIR`)])
  t.equal(keyring.current?.id, secretKeyId(Buffer.from(readFileSync(file, 'utf8').trim(), 'base64')))
  t.equal(sealedKeyId(sealed), keyring.current?.id)
  keyring.seal('another', CONTEXT)
  t.equal(first.lines.length, 1, 'made once')
  const again = recorder()
  const next = loadSecretKeyring(config, { defaultFile: true, log: again.log })
  t.equal(next.current?.id, keyring.current?.id, 'the same key on the next boot, at once')
  t.equal(next.open(sealed, CONTEXT), 'token')
  t.same(again.lines, [], 'and nothing said')
  t.same(readdirSync(dir).filter((name) => name.includes(DEFAULT_KEY_FILE)), [DEFAULT_KEY_FILE], 'no draft left behind')
  t.equal(loadSecretKeyring(config, { defaultFile: false, log: again.log }).current, undefined, 'PostgreSQL: none')
  writeFileSync(file, 'damaged\n')
  t.throws(() => loadSecretKeyring(config, { defaultFile: true, log: again.log }), { code: 'AH_ERR_CONFIG_INVALID', message: /the secrets key file .* does not hold a secrets key/ }, 'a damaged key file is never replaced')
})

t.test('a key file that appears between the look and the link is never replaced: the one there is read', async (t) => {
  const dir = tempDataDir(t)
  // a dangling link reads as missing, and is there when the new file is linked into place
  symlinkSync(join(dir, 'elsewhere.key'), join(dir, DEFAULT_KEY_FILE))
  const told = recorder()
  const keyring = loadSecretKeyring(loadConfig({ DATA_DIR: dir }), { defaultFile: true, log: told.log })
  t.throws(() => keyring.seal('token', CONTEXT), { code: 'AH_ERR_CONFIG_INVALID', message: /the secrets key file .*secrets\.key cannot be read/ })
  t.same(told.lines, [], 'nothing made')
  t.same(readdirSync(dir).sort(), [DEFAULT_KEY_FILE], 'no draft left behind')
  writeFileSync(join(dir, 'elsewhere.key'), NEW.toString('hex'))
  t.equal(loadSecretKeyring(loadConfig({ DATA_DIR: dir }), { defaultFile: true, log: told.log }).current?.id, secretKeyId(NEW))
})
