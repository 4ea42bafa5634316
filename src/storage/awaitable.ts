/**
 * What a store method returns when one implementation answers at once and another later: the
 * SQLite stores are synchronous (better-sqlite3, and composable inside one group commit), the
 * PostgreSQL stores asynchronous. Callers that may be given either `await` the result.
 */
export type Awaitable<T> = T | Promise<T>
