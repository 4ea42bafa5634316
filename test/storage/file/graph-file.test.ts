import t from 'tap'
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { FileTaskStore } from '../../../src/storage/file/tasks.js'
import { GraphFile } from '../../../src/storage/file/graph-file.js'
import { newTaskNode } from '../../../src/storage/tasks/task.js'
import { tempDataDir } from '../../helper.js'

const node = (id: string, extra: Record<string, unknown> = {}): ReturnType<typeof newTaskNode> => ({ ...newTaskNode({ id, type: 'w' }, new Date('2026-11-25T07:00:00.000Z')), ...extra })

t.test('the file is {"tasks": [...]} with one task per line, and reads back as written', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir)
  t.teardown(async () => { await store.close() })
  await store.create([{ id: 'a', type: 'w', inputs: { text: 'line one\nline two, with "quotes"' } }, { id: 'b', type: 'w' }])
  const text = readFileSync(store.file, 'utf8')
  const lines = text.split('\n')
  t.equal(lines[0], '{"tasks":[')
  t.match(lines[1], /^\{"id":"a",.*\},$/)
  t.match(lines[2], /^\{"id":"b",.*\}$/)
  t.same(lines.slice(3), [']}', ''])
  t.same(JSON.parse(text).tasks.map((x: { id: string }) => x.id), ['a', 'b'], 'plain JSON to any reader')
  const other = new FileTaskStore(dir)
  t.teardown(async () => { await other.close() })
  t.same((await other.get('a'))?.inputs, { text: 'line one\nline two, with "quotes"' })
})

t.test('a graph in any other layout of the same JSON is read, and written back in ours', async (t) => {
  const dir = tempDataDir(t)
  const store = new FileTaskStore(dir)
  t.teardown(async () => { await store.close() })
  for (const layout of [JSON.stringify({ tasks: [node('a'), node('b')] }), JSON.stringify({ tasks: [node('a'), node('b')] }, null, 2) + '\n']) {
    writeFileSync(store.file + '.new', layout)
    renameSync(store.file + '.new', store.file)
    t.same((await store.list()).map((x) => x.id), ['a', 'b'])
    const claimed = await store.claim('w', 'me', 60_000)
    t.equal(claimed?.id, 'a')
    t.match(readFileSync(store.file, 'utf8'), /^\{"tasks":\[\n\{"id":"a",.*"status":"IN_PROGRESS".*\},\n\{"id":"b",/)
  }
  // lines of our layout that are not one task each: read as JSON all the same
  writeFileSync(store.file, `{"tasks":[\n${JSON.stringify(node('a'))}, ${JSON.stringify(node('b'))}\n]}\n`)
  t.same((await store.list()).map((x) => x.id), ['a', 'b'])
  writeFileSync(store.file, `{"tasks":[\n${JSON.stringify(node('a'))},\n${JSON.stringify(node('b'))},\n]}\n`)
  await t.rejects(store.list(), SyntaxError, 'a trailing comma is not JSON')
  writeFileSync(store.file, '{"tasks":[]}\n')
  t.same(await store.list(), [])
})

t.test('a file replaced by another process is read again; one changed in place is too', async (t) => {
  const dir = tempDataDir(t)
  const a = new FileTaskStore(dir)
  const b = new FileTaskStore(dir)
  t.teardown(async () => { await a.close(); await b.close() })
  await a.create([{ id: 'x', type: 'w' }, { id: 'y', type: 'w' }])
  t.equal((await b.claim('w', 'b', 60_000))?.id, 'x')
  t.equal((await a.get('x'))?.status, 'IN_PROGRESS', 'a sees what b wrote')
  t.equal((await a.claim('w', 'a', 60_000))?.id, 'y', 'and claims on top of it')
  t.same((await b.list()).map((x) => [x.id, x.owner]), [['x', 'b'], ['y', 'a']])
  // an editor saving over the file in place (outside the lock's protocol, which always renames)
  const edited = readFileSync(a.file, 'utf8').replace('"owner":"a"', '"owner":"edited-by-hand"')
  writeFileSync(a.file, edited)
  t.equal((await a.get('y'))?.owner, 'edited-by-hand')
})

t.test('what the store hands out is a copy: changing it changes nothing stored', async (t) => {
  const store = new FileTaskStore(tempDataDir(t))
  t.teardown(async () => { await store.close() })
  const [created] = await store.create([{ id: 'a', type: 'w', inputs: { n: 1 } }])
  ;(created?.inputs as { n: number }).n = 2
  const claimed = await store.claim('w', 'me', 60_000)
  t.same(claimed?.inputs, { n: 1 })
  ;(claimed as { status: string }).status = 'COMPLETED'
  const [listed] = await store.list()
  t.equal(listed?.status, 'IN_PROGRESS')
  ;(listed?.inputs as { n: number }).n = 3
  t.same((await store.get('a'))?.inputs, { n: 1 })
  t.match(readFileSync(store.file, 'utf8'), /"inputs":\{"n":1\}/)
})

t.test('changes made while a write is under way share the next write; each settles on its own', async (t) => {
  const store = new FileTaskStore(tempDataDir(t))
  t.teardown(async () => { await store.close() })
  await store.create(Array.from({ length: 40 }, (_, i) => ({ id: `t${String(i).padStart(2, '0')}`, type: 'w' })))
  const before = store.writes
  const claims = await Promise.all(Array.from({ length: 40 }, async (_, i) => await store.claim('w', `w${i}`, 60_000)))
  t.equal(new Set(claims.map((c) => c?.id)).size, 40, 'forty claims, forty different tasks')
  t.ok(store.writes - before <= 3, `forty claims in ${store.writes - before} writes`)
  const [first, second] = claims as [NonNullable<(typeof claims)[0]>, NonNullable<(typeof claims)[0]>]
  const results = await Promise.allSettled([
    store.complete(first.id, { owner: first.owner ?? '', attempt: first.attempt }, { ok: true }),
    store.complete(second.id, { owner: 'not-its-owner', attempt: second.attempt }, {}),
    store.heartbeat(second.id, { owner: second.owner ?? '', attempt: second.attempt }, 60_000),
    store.cancel('no-such-task')
  ])
  t.same(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled', 'rejected'])
  t.match(results[1], { reason: { code: 'AH_ERR_TASK_STALE_CLAIM' } })
  t.match(results[3], { reason: { code: 'AH_ERR_TASK_NOT_FOUND' } })
  const stored = new FileTaskStore(store.file.slice(0, store.file.lastIndexOf('/')))
  t.teardown(async () => { await stored.close() })
  t.same([(await stored.get(first.id))?.status, (await stored.get(second.id))?.status], ['COMPLETED', 'IN_PROGRESS'], 'each write is on disk for another process')
})

t.test('GraphFile: no file is no tasks; close lets go of the file', async (t) => {
  const dir = tempDataDir(t)
  const file = new GraphFile(`${dir}/g.json`)
  t.same(await file.read(), [])
  writeFileSync(`${dir}/g.json`, '{"tasks":[]}\n')
  t.same(await file.read(), [])
  await file.close()
  await file.close()
})
