import t from 'tap'
import pino from 'pino'
import { buildApp } from '../../src/app.js'
import { lazyChild } from '../../src/assist/run.js'
import { AGENTS, envelope, testConfig } from '../helper.js'

// Issue 33: a run's logger is a child of the request's (its lines carry the agent, the request id
// and the mode), made only when a line at an enabled level is written: pino's child() serialises its
// bindings, which a run logging nothing at a quiet level paid for on every request.

type Line = Record<string, unknown> & { level: number, msg: string }

t.test('lazyChild makes the child on the first enabled line, once, and none for lines the level drops', async (t) => {
  const lines: Line[] = []
  const parent = pino({ level: 'warn' }, { write: (line: string) => { lines.push(JSON.parse(line) as Line) } })
  let made = 0
  const child = parent.child.bind(parent)
  parent.child = ((bindings: pino.Bindings) => { made++; return child(bindings) }) as typeof parent.child
  const log = lazyChild(parent, { agent: 'echo', requestId: 'r1' })
  log.info({ a: 1 }, 'dropped')
  log.debug({}, 'dropped')
  t.equal(made, 0, 'no child for lines below the level')
  log.warn({ b: 2 }, 'kept')
  log.error({ c: 3 }, 'kept too')
  t.equal(made, 1, 'one child, made once')
  t.match(lines, [{ msg: 'kept', agent: 'echo', requestId: 'r1', b: 2 }, { msg: 'kept too', agent: 'echo', requestId: 'r1', c: 3 }])
  t.equal(lines.length, 2)
})

t.test('a logger without isLevelEnabled gets its child on the first line', async (t) => {
  const seen: Array<[string, object, string | undefined]> = []
  const leveled = (bindings: object) => Object.fromEntries(['trace', 'debug', 'info', 'warn', 'error', 'fatal'].map((level) => [level, (obj: object, msg?: string) => { seen.push([level, { ...bindings, ...obj }, msg]) }]))
  const parent = { ...leveled({}), child: (bindings: object) => leveled(bindings) } as unknown as Parameters<typeof lazyChild>[0]
  const log = lazyChild(parent, { agent: 'x' })
  log.trace({}, 't'); log.fatal({ n: 1 }, 'f')
  t.same(seen, [['trace', { agent: 'x' }, 't'], ['fatal', { agent: 'x', n: 1 }, 'f']])
})

t.test('a run\'s "run ended" line carries its agent, request id and mode at info, and is absent at warn', async (t) => {
  for (const level of ['info', 'warn']) {
    const lines: Line[] = []
    const app = await buildApp(testConfig(t, { LOG_LEVEL: level, WORKERS_PER_TYPE: '0' }), { logStream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } })
    t.teardown(() => app.close())
    const res = await app.inject({ method: 'POST', url: '/v1/assist', headers: { accept: 'application/json' }, payload: envelope(AGENTS.echo) })
    t.equal(res.statusCode, 200)
    const ended = lines.filter((l) => l.msg === 'run ended')
    if (level === 'info') t.match(ended, [{ agent: 'echo', mode: 'request_response', reason: 'done', requestId: String }], 'bound once, at info')
    else t.same(ended, [], 'nothing at warn')
  }
})
