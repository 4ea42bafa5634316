// Shared by the benchmarks: a throwaway DATA_DIR, the result file, and a table printer.
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir, cpus } from 'node:os'
import { join } from 'node:path'

export function tempDir () {
  const dir = mkdtempSync(join(tmpdir(), 'agent-host-bench-'))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) }
}

export function mean (values) {
  return values.reduce((a, b) => a + b, 0) / values.length
}

/** Write `result` to bench/results/<name>-<time>.json and <name>-latest.json, and say where. */
export function saveResult (name, result) {
  const dir = new URL('./results/', import.meta.url)
  mkdirSync(dir, { recursive: true })
  const stamp = new Date().toISOString().replace(/[:.]/g, '-')
  const body = JSON.stringify({ node: process.version, cpus: cpus().length, at: new Date().toISOString(), ...result }, null, 2) + '\n'
  writeFileSync(new URL(`${name}-${stamp}.json`, dir), body)
  writeFileSync(new URL(`${name}-latest.json`, dir), body)
  console.log(`\nwritten to bench/results/${name}-${stamp}.json (and ${name}-latest.json)`)
}

export function arg (name, fallback) {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`))
  const value = flag?.slice(name.length + 3) ?? process.env[`BENCH_${name.toUpperCase()}`]
  return value === undefined ? fallback : Number(value)
}
