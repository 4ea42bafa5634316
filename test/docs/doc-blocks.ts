import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { harnessFreeEnv } from '../child-env.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/**
 * The text of the section under `heading` (a whole line, `### A2A server`) of the page `file` (from
 * the repository's root, `docs/a2a.md`): from the heading to the next heading of its level
 * or above. A `#` line inside a code block is a shell comment, not a heading. The docs' examples are
 * tested as written, so a test finds them by the heading a reader sees.
 */
export function docSection (file: string, heading: string): string {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n')
  const first = lines.indexOf(heading)
  if (first < 0) throw new Error(`${file} has no section "${heading}"`)
  const level = /^#+/.exec(heading)?.[0].length ?? 2
  const section = [heading]
  let fenced = false
  for (const line of lines.slice(first + 1)) {
    if (line.startsWith('```')) fenced = !fenced
    else if (!fenced && /^#+ /.test(line) && (/^#+/.exec(line)?.[0].length ?? 0) <= level) break
    section.push(line)
  }
  return section.join('\n')
}

/** The fenced blocks marked `lang` (`sh`, `json`, `js`) of that section, in order, each ending in a newline. */
export function docBlocks (file: string, heading: string, lang = 'sh'): string[] {
  const blocks: string[] = []
  let block: string[] | undefined
  let other = false
  for (const line of docSection(file, heading).split('\n')) {
    if (block !== undefined) {
      if (line.startsWith('```')) { blocks.push(block.join('\n') + '\n'); block = undefined } else block.push(line)
    } else if (other) other = !line.startsWith('```')
    else if (line === '```' + lang) block = []
    else if (line.startsWith('```')) other = true
  }
  return blocks
}

/**
 * Run a docs block (or part of one) with bash in the repository's root (or `cwd`: a copy of the
 * project), as a reader pastes it, with `-euo pipefail`, and `env` set as the reader would have it
 * (`AGENT_HOST_KEY`): its stdout; a failure rejects with its stderr.
 */
export async function runShell (script: string, { cwd = ROOT, env = {} }: { cwd?: string, env?: Record<string, string> } = {}): Promise<string> {
  return await new Promise((resolve, reject) => {
    execFile('bash', ['-euo', 'pipefail', '-c', script], { cwd, env: { ...harnessFreeEnv(), ...env }, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(stdout)
    })
  })
}
