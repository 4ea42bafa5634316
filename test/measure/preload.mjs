// What a test file waits on, for the durations report (scripts/test-report.ts): loaded into every
// test process by .taprc's node-arg, it counts the processes the file starts (by command), the
// servers it listens with, the PostgreSQL databases it makes, and the timers of 100 ms or more that
// fire (sleeps, timeouts, polls), and at exit writes them to .tap/measure/<pid>.json. Only a test
// file's own process writes (not the servers and workers it starts, which inherit execArgv).
// Plain JavaScript, so that it loads before tap's TypeScript loader and costs nothing to compile.
import { createRequire, syncBuiltinESMExports } from 'node:module'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { basename, join, relative } from 'node:path'

// children started with process.execArgv (servers, workers) may run in another folder: name this file absolutely
process.execArgv = process.execArgv.map((arg) => /^--import=\.\/.*measure\/preload\.mjs$/.test(arg) ? `--import=${import.meta.url}` : arg)

const file = process.argv[1]
if (file !== undefined && /\.test\.(ts|mjs)$/.test(file) && process.env.AGENT_HOST_MEASURE !== '0') {
  const require = createRequire(import.meta.url)
  const started = Date.now()
  const counts = { processes: {}, servers: 0, pgDatabases: 0, timers: 0, timerMs: 0 }
  const count = (command) => {
    const name = basename(String(command))
    counts.processes[name] = (counts.processes[name] ?? 0) + 1
  }

  const { promisify } = require('node:util')
  // a wrapper keeps what util.promisify finds on the original (execFile's and exec's { stdout, stderr })
  const wrap = (original, counted) => {
    const wrapper = function (...args) { counted(...args); return original.apply(this, args) }
    const custom = original[promisify.custom]
    if (custom !== undefined) wrapper[promisify.custom] = function (...args) { counted(...args); return custom.apply(this, args) }
    return wrapper
  }
  const childProcess = require('node:child_process')
  for (const method of ['spawn', 'spawnSync', 'execFile', 'execFileSync', 'fork']) {
    childProcess[method] = wrap(childProcess[method], (command, args) => {
      // a script run with node names the script, not node
      const list = Array.isArray(args) ? args : []
      const script = method === 'fork' ? command : /(^|\/)node$/.test(String(command)) ? list.find((a) => typeof a === 'string' && !a.startsWith('-')) : undefined
      count(script ?? command)
    })
  }
  for (const method of ['exec', 'execSync']) {
    childProcess[method] = wrap(childProcess[method], (command) => { count(String(command).split(' ')[0]) })
  }

  const net = require('node:net')
  const listen = net.Server.prototype.listen
  net.Server.prototype.listen = function (...args) {
    counts.servers++
    return listen.apply(this, args)
  }

  const timed = (delay) => typeof delay === 'number' && delay >= 100
  const fired = (delay) => { counts.timers++; counts.timerMs += delay }
  const setTimeoutOriginal = globalThis.setTimeout
  const wrapped = function (callback, delay, ...args) {
    if (!timed(delay) || typeof callback !== 'function') return setTimeoutOriginal(callback, delay, ...args)
    return setTimeoutOriginal((...a) => { fired(delay); return callback(...a) }, delay, ...args)
  }
  const sleepCustom = setTimeoutOriginal[promisify.custom]
  if (sleepCustom !== undefined) {
    wrapped[promisify.custom] = async function (delay, ...rest) {
      const value = await sleepCustom.call(this, delay, ...rest)
      if (timed(delay)) fired(delay)
      return value
    }
  }
  globalThis.setTimeout = wrapped
  const timers = require('node:timers')
  timers.setTimeout = globalThis.setTimeout
  const promises = require('node:timers/promises')
  const sleep = promises.setTimeout
  promises.setTimeout = async function (delay, ...rest) {
    const value = await sleep(delay, ...rest)
    if (timed(delay)) fired(delay)
    return value
  }
  syncBuiltinESMExports()

  try {
    // through the test loader, as the tests import it: the same copy of pg (scripts/vendor-bundle.mjs)
    const { default: pg } = await import('pg')
    const query = pg.Client.prototype.query
    pg.Client.prototype.query = function (config, ...rest) {
      const text = typeof config === 'string' ? config : config?.text
      if (typeof text === 'string' && /^\s*CREATE DATABASE/i.test(text)) counts.pgDatabases++
      return query.call(this, config, ...rest)
    }
  } catch {
    // no pg here: nothing to count
  }

  // CPU seconds of this process and of the children it waited for (servers, workers, npm, tsc):
  // /proc/self/stat's utime, stime, cutime and cstime, in Linux's clock ticks (USER_HZ, 100)
  const cpuSeconds = () => {
    try {
      const fields = readFileSync('/proc/self/stat', 'utf8').replace(/^.*\) /, '').split(' ')
      return fields.slice(11, 15).reduce((sum, ticks) => sum + Number(ticks), 0) / 100
    } catch {
      return undefined
    }
  }

  process.once('exit', () => {
    try {
      const dir = join(process.cwd(), '.tap', 'measure')
      mkdirSync(dir, { recursive: true })
      writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify({ file: relative(process.cwd(), file), ms: Date.now() - started, cpuS: cpuSeconds(), ...counts }))
    } catch {
      // a report is not worth failing a test for
    }
  })
}
