import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const README = fileURLToPath(new URL('../../README.md', import.meta.url))

/**
 * The `sh` blocks of the README's section under `heading` (`### Walkthrough: ...`), in order: from
 * the heading to the next heading of its level or above (a `#` line inside a code block is a shell
 * comment, not a heading). The README's examples are tested as written.
 */
export function readmeShellBlocks (heading: string): string[] {
  const lines = readFileSync(README, 'utf8').split('\n')
  const first = lines.indexOf(heading)
  if (first < 0) throw new Error(`the README has no section "${heading}"`)
  const level = /^#+/.exec(heading)?.[0].length ?? 2
  const blocks: string[] = []
  let block: string[] | undefined
  let other = false
  for (const line of lines.slice(first + 1)) {
    if (block !== undefined) {
      if (line.startsWith('```')) { blocks.push(block.join('\n') + '\n'); block = undefined } else block.push(line)
    } else if (other) other = !line.startsWith('```')
    else if (line === '```sh') block = []
    else if (line.startsWith('```')) other = true
    else if (/^#+ /.test(line) && (/^#+/.exec(line)?.[0].length ?? 0) <= level) break
  }
  return blocks
}
