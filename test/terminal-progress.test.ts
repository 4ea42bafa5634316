import t from 'tap'
import { terminalProgress } from '../src/terminal-progress.js'

const CLEAR = '\x1b[K'

/** A progress line over a fake clock, and what it wrote. */
function line (options: { columns?: number, intervalMs?: number } = {}): { progress: ReturnType<typeof terminalProgress>, written: string[], clock: { now: number } } {
  const written: string[] = []
  const clock = { now: 1000 }
  return { progress: terminalProgress((text) => { written.push(text) }, { ...options, now: () => clock.now }), written, clock }
}

t.test('the first update is drawn at once, in place, with its percentage', async (t) => {
  const { progress, written } = line()
  progress.update(250, 1000, 'verifying audit rows')
  t.same(written, [`\rverifying audit rows: 250/1000 (25%)${CLEAR}`])
})

t.test('updates of the same work are redrawn at most every 100 ms', async (t) => {
  const { progress, written, clock } = line()
  progress.update(1, 10, 'rows')
  clock.now += 99
  progress.update(2, 10, 'rows')
  progress.update(3, 10, 'rows')
  t.equal(written.length, 1, 'within the interval nothing is drawn')
  clock.now += 1
  progress.update(4, 10, 'rows')
  t.same(written, [`\rrows: 1/10 (10%)${CLEAR}`, `\rrows: 4/10 (40%)${CLEAR}`])
})

t.test('new work is drawn at once, so a slow step never shows the name of the one before', async (t) => {
  const { progress, written } = line({ intervalMs: 60_000 })
  progress.update(0, 2, 'migrating (1: first)')
  progress.update(1, 2, 'migrating (2: second)')
  t.same(written, [`\rmigrating (1: first): 0/2 (0%)${CLEAR}`, `\rmigrating (2: second): 1/2 (50%)${CLEAR}`])
})

t.test('end() clears a drawn line once, and writes nothing when nothing was drawn', async (t) => {
  const { progress, written } = line()
  progress.end()
  t.same(written, [], 'nothing drawn, nothing cleared')
  progress.update(1, 2, 'rows')
  progress.end()
  progress.end()
  t.same(written, [`\rrows: 1/2 (50%)${CLEAR}`, `\r${CLEAR}`])
  progress.update(2, 2, 'rows')
  t.equal(written.at(-1), `\rrows: 2/2 (100%)${CLEAR}`, 'after end() the next update is drawn at once')
})

t.test('a long label is cut to the terminal width, keeping the count; no percentage of nothing', async (t) => {
  const { progress, written } = line({ columns: 30 })
  progress.update(3, 7, 'migrating the database (12: a step with a very long description)')
  const drawn = (written[0] as string).slice(1, -CLEAR.length)
  t.equal(drawn, 'migrating the dat…: 3/7 (42%)')
  t.equal(drawn.length, 29, 'the last column stays empty: the line never wraps')
  progress.update(0, 0, 'an empty log')
  t.equal(written[1], `\ran empty log: 0/0${CLEAR}`)
  const narrow = line({ columns: 8 })
  narrow.progress.update(123456, 1234567, 'rows')
  t.equal(narrow.written[0], `\r…: 1234${CLEAR}`, 'narrower than the count: cut all the same')
  const unknown = line({ columns: 0 })
  unknown.progress.update(1, 2, 'x'.repeat(200))
  t.equal((unknown.written[0] as string).length, 80 + CLEAR.length, 'a width of 0 (unknown) counts as 80')
})

t.test('the real clock is the default', async (t) => {
  const written: string[] = []
  const progress = terminalProgress((text) => { written.push(text) }, { intervalMs: 60_000 })
  progress.update(1, 2, 'rows')
  progress.update(2, 2, 'rows')
  t.equal(written.length, 1, 'the second update is within the minute: not drawn')
})
