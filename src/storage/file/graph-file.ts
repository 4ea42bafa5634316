import { open, stat, type FileHandle } from 'node:fs/promises'
import type { TaskNode } from '../tasks/task.js'

const HEAD = Buffer.from('{"tasks":[\n')
const TAIL = Buffer.from('\n]}\n')
const COMMA_NL = Buffer.from(',\n')
const EMPTY = Buffer.from('{"tasks":[]}\n')
const NL = 0x0a
const COMMA = 0x2c

/** One version of the file, held open so that its inode number cannot be reused while we know it. */
interface Version { handle: FileHandle, dev: bigint, ino: bigint, size: bigint, mtimeNs: bigint, tasks: TaskNode[] }

const errno = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code

/** The first `size` bytes of the file (its size as just fstat'ed: readFile would fstat it again). */
async function readAll (handle: FileHandle, size: number): Promise<Buffer> {
  const bytes = Buffer.allocUnsafe(size)
  let read = 0
  while (read < size) {
    const { bytesRead } = await handle.read(bytes, read, size - read, read)
    if (bytesRead === 0) break
    read += bytesRead
  }
  return bytes.subarray(0, read)
}

/**
 * The text of the task graph file, `{ "tasks": [...] }` written one task per line, and what this
 * process last saw of it, so that most of a read-modify-write is skipped:
 *
 * - a file this process wrote or read, and nobody replaced since, is not read again: every writer
 *   replaces the file by a rename (`graph-lock.ts`), so the path still naming the inode we hold
 *   open (with the same size and mtime) is the version we know;
 * - a task line seen before is not parsed again, and a task not changed since it was read or
 *   written is not stringified (or encoded) again: each node keeps its line's bytes.
 *
 * The nodes it returns are shared with its caches: callers must never mutate them (the task-graph
 * functions return new nodes), and the store hands out copies.
 */
export class GraphFile {
  readonly path: string
  #version: Version | undefined
  /** The lines of the version last seen (their bytes as latin1, a cheap exact key) to their nodes; built when first needed. */
  #parsed: Map<string, TaskNode> | undefined
  #lines = new WeakMap<TaskNode, Buffer>()

  constructor (path: string) {
    this.path = path
  }

  /** The tasks in the file now (a new array; the nodes are shared, see above). No file is no tasks. */
  async read (): Promise<TaskNode[]> {
    let now
    try {
      now = await stat(this.path, { bigint: true })
    } catch (err) {
      if (errno(err) === 'ENOENT') return []
      throw err
    }
    const known = this.#version
    if (known !== undefined && now.ino === known.ino && now.dev === known.dev && now.size === known.size && now.mtimeNs === known.mtimeNs) return [...known.tasks]
    let handle: FileHandle
    try {
      handle = await open(this.path, 'r')
    } catch (err) {
      if (errno(err) === 'ENOENT') return []
      throw err
    }
    try {
      const opened = await handle.stat({ bigint: true })
      const tasks = this.#decode(await readAll(handle, Number(opened.size)))
      this.#install({ handle, dev: opened.dev, ino: opened.ino, size: opened.size, mtimeNs: opened.mtimeNs, tasks })
      return [...tasks]
    } catch (err) {
      await handle.close()
      throw err
    }
  }

  /** The file's bytes for `tasks`, in pieces to write in order: one task per line, unchanged tasks' lines reused. */
  encode (tasks: TaskNode[]): Buffer[] {
    if (tasks.length === 0) return [EMPTY]
    const parts: Buffer[] = [HEAD]
    for (const node of tasks) parts.push(this.#line(node), COMMA_NL)
    parts[parts.length - 1] = TAIL
    return parts
  }

  /** Remember `tasks`, just written to the file that `handle` holds open, as the version we know. */
  async written (handle: FileHandle, tasks: TaskNode[]): Promise<void> {
    try {
      const st = await handle.stat({ bigint: true })
      this.#parsed = undefined
      this.#install({ handle, dev: st.dev, ino: st.ino, size: st.size, mtimeNs: st.mtimeNs, tasks: [...tasks] })
    } catch {
      // what was written stands; only the shortcut for the next read is lost
      await handle.close().catch(() => {})
    }
  }

  async close (): Promise<void> {
    const known = this.#version
    this.#version = undefined
    await known?.handle.close()
  }

  #line (node: TaskNode): Buffer {
    let line = this.#lines.get(node)
    if (line === undefined) {
      line = Buffer.from(JSON.stringify(node))
      this.#lines.set(node, line)
    }
    return line
  }

  #install (version: Version): void {
    const old = this.#version
    this.#version = version
    // nothing reads through a version's handle: it only pins the inode, so closing it races with nothing
    if (old !== undefined) old.handle.close().catch(() => {})
  }

  #decode (bytes: Buffer): TaskNode[] {
    if (bytes.length > HEAD.length + TAIL.length && bytes.subarray(0, HEAD.length).equals(HEAD) && bytes.subarray(-TAIL.length).equals(TAIL)) {
      const tasks = this.#decodeLines(bytes, HEAD.length, bytes.length - TAIL.length)
      if (tasks !== undefined) return tasks
    }
    // any other layout of the same JSON (an older version's single line, a hand-edited file)
    const data = JSON.parse(bytes.toString('utf8')) as { tasks?: unknown } | null
    if (data === null || typeof data !== 'object' || !Array.isArray(data.tasks)) throw new Error(`${this.path} is not {"tasks": [...]}`)
    this.#parsed = new Map()
    return data.tasks as TaskNode[]
  }

  /** The tasks of the lines in `bytes[from, to)` when each is one task (our layout), else undefined. */
  #decodeLines (bytes: Buffer, from: number, to: number): TaskNode[] | undefined {
    const known = this.#parsed ?? new Map((this.#version?.tasks ?? []).map((node) => [this.#line(node).toString('latin1'), node]))
    const parsed = new Map<string, TaskNode>()
    const tasks: TaskNode[] = []
    for (let start = from; start < to;) {
      const newline = bytes.indexOf(NL, start)
      const last = newline < 0 || newline >= to
      const end = last ? to : newline - 1
      if (!last && bytes[end] !== COMMA) return undefined
      const key = bytes.toString('latin1', start, end)
      let node = known.get(key)
      if (node === undefined) {
        try {
          node = JSON.parse(bytes.toString('utf8', start, end)) as TaskNode
        } catch {
          return undefined
        }
        if (node === null || typeof node !== 'object' || Array.isArray(node)) return undefined
        this.#lines.set(node, Buffer.from(bytes.subarray(start, end)))
      }
      parsed.set(key, node)
      tasks.push(node)
      start = last ? to : newline + 1
    }
    this.#parsed = parsed
    return tasks
  }
}
