import t from 'tap'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import semver from 'semver'

// `npm ci` on every runtime the README names installs without an EBADENGINE warning: each package
// in the lockfile admits the oldest Node.js package.json's engines allow, and the image's.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const read = (file: string): string => readFileSync(ROOT + file, 'utf8')
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { version?: string, engines?: { node?: string } | string[] }> }
const range = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node
const oldest = semver.minVersion(range)?.version as string
const image = /^FROM node:(\d+\.\d+\.\d+)/m.exec(read('Dockerfile'))?.[1] as string

t.test('every package of the lockfile runs on the oldest Node.js the project admits, and on the image\'s', async (t) => {
  t.ok(oldest, `package.json admits ${range}`)
  t.ok(image, 'the Dockerfile names its Node.js release')
  const refused: string[] = []
  for (const [path, entry] of Object.entries(lock.packages)) {
    const wants = Array.isArray(entry.engines) ? undefined : entry.engines?.node
    if (wants === undefined || path === '') continue
    for (const version of [oldest, image]) if (!semver.satisfies(version, wants)) refused.push(`${path}@${entry.version ?? '?'} wants node ${wants}, not ${version}`)
  }
  t.same(refused, [], 'no EBADENGINE')
})

t.test('the README names the oldest Node.js package.json admits', async (t) => {
  const [major, minor] = oldest.split('.')
  t.match(read('README.md'), `Node.js 24 (the current LTS) or ${major}.${minor}+`)
})
