import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { AH_ERR_CONFIG_INVALID } from '../errors.js'

/**
 * Make DATA_DIR if it is missing and check that this process may write it (and the database file in
 * it, if there is one), so that a volume owned by another user stops the boot with what to do
 * instead of a bare SQLite error: the container runs as `node` (uid 1000) and a bind mount keeps its
 * host owner.
 */
export function ensureWritableDir (dir: string, file?: string): void {
  const uid = process.getuid?.() ?? -1
  const refuse = (path: string): never => {
    const where = existsSync(path) ? statSync(path) : undefined
    const owner = where === undefined ? 'it cannot be made' : `it belongs to uid ${where.uid}, gid ${where.gid}, mode ${(where.mode & 0o777).toString(8)}`
    throw new AH_ERR_CONFIG_INVALID(`${path === dir ? 'DATA_DIR ' : ''}${path} is not writable by this process (uid ${uid}): ${owner}. ` +
      'Give it to the server\'s user (in the Docker image: chown -R 1000:1000 on the host folder, or use a named volume), or set DATA_DIR to a folder it may write')
  }
  try {
    mkdirSync(dir, { recursive: true })
    accessSync(dir, constants.W_OK | constants.X_OK)
  } catch {
    refuse(dir)
  }
  if (file === undefined) return
  const path = join(dir, file)
  try {
    if (existsSync(path)) accessSync(path, constants.R_OK | constants.W_OK)
  } catch {
    refuse(path)
  }
}
