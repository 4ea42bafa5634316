import type { Config } from '../../config.js'
import type { TaskStore } from '../tasks/task-store.js'
import { FileTaskStore } from './tasks.js'

/** The default task store (TASK_STORE=file): DATA_DIR's `tasks.graph.json` under its fenced lock, beside either database. */
export function openFileTaskStore (config: Config): TaskStore {
  return new FileTaskStore(config.DATA_DIR, { staleMs: config.TASK_LOCK_STALE_MS })
}
