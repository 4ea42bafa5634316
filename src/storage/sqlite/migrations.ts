/**
 * The schema, as numbered steps. Append a step to change it; never edit one that has shipped.
 */
export const MIGRATIONS: ReadonlyArray<{ version: number, description: string, sql: string }> = [
  {
    version: 1,
    description: 'sessions, interactions, values, search index, events, audit log, runs and their journal',
    sql: `
CREATE TABLE sessions (
  session_id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);

CREATE TABLE interactions (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE,
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  agent_id TEXT NOT NULL,
  agent_request_id TEXT NOT NULL,
  root_request_id TEXT NOT NULL,
  parent_request_id TEXT,
  timestamp TEXT NOT NULL,
  status TEXT NOT NULL,
  input TEXT NOT NULL,
  output TEXT NOT NULL,
  fts_rowid INTEGER
);
CREATE INDEX interactions_by_session ON interactions(session_id, id);

CREATE TABLE session_values (
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  fts_rowid INTEGER,
  PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

-- rows are found again by rowid (kept in fts_rowid above): filtering an FTS5 table on an UNINDEXED column scans it
CREATE VIRTUAL TABLE memory_fts USING fts5(content, session_id UNINDEXED, kind UNINDEXED, ref UNINDEXED);

CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL,
  kind TEXT NOT NULL,
  type TEXT NOT NULL,
  source TEXT NOT NULL,
  time TEXT NOT NULL,
  visibility TEXT NOT NULL DEFAULT 'internal',
  session_id TEXT,
  request_id TEXT,
  trace_id TEXT,
  body TEXT NOT NULL
);
CREATE INDEX events_by_session ON events(session_id, seq);
CREATE INDEX events_by_request ON events(request_id, seq);
CREATE INDEX events_by_type ON events(type, seq);

CREATE TABLE audit_log (
  audit_id INTEGER PRIMARY KEY,
  timestamp TEXT NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  resource TEXT NOT NULL,
  success INTEGER NOT NULL,
  request_id TEXT,
  root_request_id TEXT,
  trace_id TEXT,
  details TEXT,
  previous_hash TEXT NOT NULL,
  integrity_hash TEXT NOT NULL
);
CREATE TABLE audit_head (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  audit_id INTEGER NOT NULL,
  integrity_hash TEXT NOT NULL
);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;

CREATE TABLE runs (
  request_id TEXT PRIMARY KEY,
  envelope_hash TEXT NOT NULL,
  envelope TEXT NOT NULL,
  session_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  main_stream_id TEXT NOT NULL,
  state TEXT NOT NULL,
  end_reason TEXT,
  owner_instance TEXT NOT NULL,
  owner_pid INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  ended_at INTEGER,
  response_status INTEGER,
  response TEXT
);
CREATE INDEX runs_by_end ON runs(state, ended_at);

CREATE TABLE journal (
  request_id TEXT NOT NULL REFERENCES runs(request_id) ON DELETE CASCADE,
  ord INTEGER NOT NULL,
  stream_id TEXT NOT NULL,
  seq INTEGER,
  frame TEXT NOT NULL,
  PRIMARY KEY (request_id, ord)
) WITHOUT ROWID;
`
  },
  {
    version: 2,
    description: 'the task graph (TASK_STORE=sqlite)',
    sql: `
CREATE TABLE tasks (
  id TEXT PRIMARY KEY,
  type TEXT NOT NULL,
  status TEXT NOT NULL,
  priority REAL NOT NULL,
  created_at TEXT NOT NULL,
  available_at TEXT NOT NULL,
  lease_expires_at TEXT,
  conversation_id TEXT,
  node TEXT NOT NULL
);
CREATE INDEX tasks_claim ON tasks(type, status, priority DESC, created_at, id);
CREATE INDEX tasks_lease ON tasks(status, lease_expires_at);
CREATE INDEX tasks_conversation ON tasks(conversation_id, created_at);
`
  },
  {
    version: 3,
    description: 'API keys (salted hashes only)',
    sql: `
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  salt TEXT NOT NULL,
  hash TEXT NOT NULL,
  scopes TEXT NOT NULL,
  agents TEXT,
  created_at TEXT NOT NULL,
  expires_at TEXT,
  revoked_at TEXT
);
CREATE INDEX api_keys_name ON api_keys(name);
`
  },
  {
    version: 4,
    description: 'sessions belong to the key that made them',
    sql: `
ALTER TABLE sessions ADD COLUMN key_id TEXT;
`
  },
  {
    version: 5,
    description: 'runs are owned by a lease (token and expiry), not a PID; who submitted them; cancel requests from other processes',
    sql: `
ALTER TABLE runs ADD COLUMN owner_key TEXT;
ALTER TABLE runs ADD COLUMN lease_token TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at INTEGER;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
`
  },
  {
    version: 6,
    description: 'interactions are added to the search index in batches: the ones still to index',
    sql: `
CREATE INDEX interactions_unindexed ON interactions(id) WHERE fts_rowid IS NULL;
`
  },
  {
    version: 7,
    description: 'the journal is keyed by the run\'s integer id, one row per flush: a run\'s packets append where the newest runs\' are, not on a random page of a UUID-keyed tree',
    // journal rows keyed by (request_id, ord) landed on a random leaf per run, and each split it:
    // ~3 pages a run in the WAL, then again at the checkpoint (bench/assist.js disk bytes per request);
    // and a row per packet cost ~1.9 µs of the ~6.7 µs of CPU a streamed packet took (bench/stream.js)
    sql: `
CREATE TABLE runs_v7 (
  run_id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE,
  envelope_hash TEXT NOT NULL,
  envelope TEXT NOT NULL,
  session_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  main_stream_id TEXT NOT NULL,
  state TEXT NOT NULL,
  end_reason TEXT,
  owner_instance TEXT NOT NULL,
  owner_pid INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  ended_at INTEGER,
  response_status INTEGER,
  response TEXT,
  owner_key TEXT,
  lease_token TEXT,
  lease_expires_at INTEGER,
  cancel_requested INTEGER NOT NULL DEFAULT 0
);
INSERT INTO runs_v7 (run_id, request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, end_reason, owner_instance, owner_pid,
    started_at, ended_at, response_status, response, owner_key, lease_token, lease_expires_at, cancel_requested)
  SELECT rowid, request_id, envelope_hash, envelope, session_id, agent_id, main_stream_id, state, end_reason, owner_instance, owner_pid,
    started_at, ended_at, response_status, response, owner_key, lease_token, lease_expires_at, cancel_requested FROM runs ORDER BY rowid;
-- one row per flush of a run: its frames, newline-separated (JSON text has no raw newline), the last one's ord and how many
CREATE TABLE journal_v7 (
  run_id INTEGER NOT NULL REFERENCES runs_v7(run_id) ON DELETE CASCADE,
  ord INTEGER NOT NULL,
  count INTEGER NOT NULL,
  frames TEXT NOT NULL,
  PRIMARY KEY (run_id, ord)
) WITHOUT ROWID;
INSERT INTO journal_v7 (run_id, ord, count, frames)
  SELECT r.run_id, j.ord, 1, j.frame FROM journal j JOIN runs_v7 r ON r.request_id = j.request_id ORDER BY r.run_id, j.ord;
DROP TABLE journal;
DROP TABLE runs;
ALTER TABLE runs_v7 RENAME TO runs;
ALTER TABLE journal_v7 RENAME TO journal;
CREATE INDEX runs_by_end ON runs(state, ended_at);
`
  },
  {
    version: 8,
    description: 'the search index keeps no second copy of the text and is keyed by interaction id (values: negative ids); interactions are indexed up to a mark, not flagged one by one; values in batches',
    // per request this saves the index's copy of the text, rewriting the interaction to flag it
    // indexed, and a random page of a UUID index (bench/assist.js disk bytes per request). A run
    // records its interaction once: its finish is fenced by the run's lease in the same transaction.
    // AUTOINCREMENT: an id is never reused after an erasure, so everything above the mark is new.
    sql: `
CREATE TABLE interactions_v8 (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  request_id TEXT NOT NULL,
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  agent_id TEXT NOT NULL,
  agent_request_id TEXT NOT NULL,
  root_request_id TEXT NOT NULL,
  parent_request_id TEXT,
  timestamp TEXT NOT NULL,
  status TEXT NOT NULL,
  input TEXT NOT NULL,
  output TEXT NOT NULL
);
INSERT INTO interactions_v8 (id, request_id, session_id, agent_id, agent_request_id, root_request_id, parent_request_id, timestamp, status, input, output)
  SELECT id, request_id, session_id, agent_id, agent_request_id, root_request_id, parent_request_id, timestamp, status, input, output FROM interactions ORDER BY id;
DROP TABLE interactions;
ALTER TABLE interactions_v8 RENAME TO interactions;
CREATE INDEX interactions_by_session ON interactions(session_id, id);
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5(content, session_id UNINDEXED, kind UNINDEXED, ref UNINDEXED, content='', contentless_delete=1, contentless_unindexed=1);
UPDATE session_values SET fts_rowid = -fts_rowid;
INSERT INTO memory_fts (rowid, content, session_id, kind, ref) SELECT id, input || ' ' || output, session_id, 'interaction', request_id FROM interactions ORDER BY id;
INSERT INTO memory_fts (rowid, content, session_id, kind, ref) SELECT fts_rowid, key || ' ' || value, session_id, 'value', key FROM session_values WHERE fts_rowid IS NOT NULL;
CREATE TABLE search_index (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  indexed_to INTEGER NOT NULL,
  next_value_rowid INTEGER NOT NULL
);
INSERT INTO search_index VALUES (1, (SELECT coalesce(max(id), 0) FROM interactions), (SELECT min(coalesce(min(fts_rowid), 0), 0) - 1 FROM session_values));
-- a stored value joins the index with the next batch: a key stored on every request is indexed once a batch
ALTER TABLE session_values ADD COLUMN pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX session_values_pending ON session_values(session_id, key) WHERE pending = 1;
`
  },
  {
    version: 9,
    description: 'the narrator\'s place in the event log and in each conversation, so that nothing is narrated twice across restarts and processes',
    sql: `
CREATE TABLE narrator_state (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  seq INTEGER NOT NULL
);
INSERT INTO narrator_state VALUES (1, (SELECT coalesce(max(seq), 0) FROM events));
CREATE TABLE narrations (
  session_id TEXT PRIMARY KEY,
  seq INTEGER NOT NULL
) WITHOUT ROWID;
`
  },
  {
    version: 10,
    description: 'task events carry their task id, indexed: a task\'s events are a lookup, at any size of the log',
    sql: `
ALTER TABLE events ADD COLUMN task_id TEXT;
UPDATE events SET task_id = json_extract(body, '$.task_id') WHERE kind = 'task' AND json_valid(body) AND json_type(body, '$.task_id') = 'text';
CREATE INDEX events_by_task ON events(task_id, seq) WHERE task_id IS NOT NULL;
`
  },
  {
    version: 11,
    description: 'the event bus (seed 003): events with their dedup key, priority and expiry; durable subscriptions; one delivery row per subscription and event until it is handled; dead letters',
    sql: `
CREATE TABLE bus_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  type TEXT NOT NULL,
  key TEXT NOT NULL,
  visibility TEXT NOT NULL,
  priority INTEGER NOT NULL,
  target_agents TEXT,
  data TEXT NOT NULL,
  source TEXT NOT NULL,
  owner_key TEXT,
  trace_id TEXT,
  published_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE INDEX bus_events_by_key ON bus_events(key, expires_at);
CREATE INDEX bus_events_by_expiry ON bus_events(expires_at);
CREATE TABLE bus_subscriptions (
  id TEXT PRIMARY KEY,
  agent TEXT,
  patterns TEXT NOT NULL,
  filter TEXT,
  max_attempts INTEGER NOT NULL,
  backoff_ms INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
-- a delivery is deleted once handled; while it waits, it is ordered by its event's priority
CREATE TABLE bus_deliveries (
  subscription_id TEXT NOT NULL REFERENCES bus_subscriptions(id) ON DELETE CASCADE,
  event_seq INTEGER NOT NULL REFERENCES bus_events(seq) ON DELETE CASCADE,
  priority INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  due_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  last_error TEXT,
  PRIMARY KEY (subscription_id, event_seq)
) WITHOUT ROWID;
CREATE INDEX bus_deliveries_next ON bus_deliveries(subscription_id, priority DESC, event_seq);
-- a dead letter keeps its event: the event itself is pruned once it expires
CREATE TABLE bus_dead_letters (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  subscription_id TEXT NOT NULL,
  event_seq INTEGER NOT NULL,
  event TEXT NOT NULL,
  owner_key TEXT,
  attempts INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  dead_at INTEGER NOT NULL
);
`
  },
  {
    version: 12,
    description: 'audit rows name the key that signed them (keyed chains: HMAC) and, apart from the acting principal, the user a request claims to be for; events name whose they are (the caller of their run, the creator of their task)',
    sql: `
ALTER TABLE audit_log ADD COLUMN claimed_user TEXT;
ALTER TABLE audit_log ADD COLUMN key_id TEXT;
ALTER TABLE events ADD COLUMN owner_key TEXT;
UPDATE events SET owner_key = (SELECT owner_key FROM runs WHERE runs.request_id = events.request_id) WHERE request_id IS NOT NULL;
CREATE INDEX events_by_owner ON events(owner_key, seq) WHERE owner_key IS NOT NULL;
`
  },
  {
    version: 13,
    description: 'runs are listed by agent and caller, newest first (A2A ListTasks)',
    sql: `
CREATE INDEX runs_by_agent ON runs(agent_id, owner_key, started_at, run_id);
`
  },
  {
    version: 14,
    description: 'A2A push notification configs and their delivery state: the last journal ord pushed (a restart resumes there), attempts, and a lease so one process pushes a config at a time',
    sql: `
CREATE TABLE a2a_push_configs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  run_key TEXT NOT NULL REFERENCES runs(request_id) ON DELETE CASCADE,
  id TEXT NOT NULL,
  task_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  owner_key TEXT,
  created_by TEXT NOT NULL,
  url TEXT NOT NULL,
  token TEXT NOT NULL,
  auth_scheme TEXT,
  auth_credentials TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  cursor INTEGER NOT NULL,
  delivered INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_status INTEGER,
  last_error TEXT,
  next_attempt_at INTEGER NOT NULL,
  state TEXT NOT NULL DEFAULT 'active',
  lease_token TEXT,
  lease_expires_at INTEGER,
  UNIQUE (run_key, id)
);
CREATE INDEX a2a_push_due ON a2a_push_configs(next_attempt_at) WHERE state = 'active';
CREATE INDEX a2a_push_by_owner ON a2a_push_configs(owner_key, seq);
`
  },
  {
    version: 15,
    description: 'a bus event carries its owner\'s agent list (JSON; null: any agent), so the work it starts is held to it',
    sql: `
ALTER TABLE bus_events ADD COLUMN owner_agents TEXT;
`
  },
  {
    version: 16,
    description: 'runs waiting for a person (human in the loop): the first request, the interrupts asked and their answers, the host calls replayed after an answer; expires_at, when the last open question expires (pruned after JOURNAL_RETENTION_MS past it)',
    sql: `
CREATE TABLE waiting_runs (
  run_key TEXT PRIMARY KEY,
  request_id TEXT NOT NULL,
  owner_key TEXT NOT NULL,
  session_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  state TEXT NOT NULL,
  version INTEGER NOT NULL,
  last_run TEXT NOT NULL UNIQUE,
  envelope TEXT NOT NULL,
  interrupts TEXT NOT NULL,
  memo TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX waiting_runs_by_session ON waiting_runs(session_id, created_at);
CREATE INDEX waiting_runs_by_request ON waiting_runs(request_id);
`
  },
  {
    version: 17,
    description: 'MCP sessions (their owner, the client\'s initialize, the log level), kept across restarts, and their SSE streams\' events for resumption (Last-Event-ID)',
    sql: `
CREATE TABLE mcp_sessions (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  cap_session_id TEXT NOT NULL,
  initialize TEXT NOT NULL,
  level TEXT,
  last_seen INTEGER NOT NULL
);
CREATE INDEX mcp_sessions_by_owner ON mcp_sessions(owner, last_seen);
CREATE INDEX mcp_sessions_by_last_seen ON mcp_sessions(last_seen);
CREATE TABLE mcp_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES mcp_sessions(id) ON DELETE CASCADE,
  stream_id TEXT NOT NULL,
  message TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX mcp_events_by_stream ON mcp_events(session_id, stream_id, seq);
CREATE INDEX mcp_events_by_time ON mcp_events(created_at);
`
  },
  {
    version: 18,
    description: 'tenants: the tenant each API key belongs to (what a key makes is stored under its principal id, which names a tenant other than the default)',
    sql: `
ALTER TABLE api_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE INDEX api_keys_by_tenant ON api_keys(tenant, created_at);
`
  },
  {
    version: 19,
    description: 'model budgets: usage per tenant or key and UTC day or month, and the reservations of backend calls in flight (each with its lease)',
    sql: `
CREATE TABLE budget_counters (
  subject TEXT NOT NULL,
  period TEXT NOT NULL,
  period_start INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  cost_usd REAL NOT NULL,
  PRIMARY KEY (subject, period, period_start)
);
CREATE INDEX budget_counters_by_period ON budget_counters(period, period_start);
CREATE TABLE budget_reservations (
  id TEXT NOT NULL,
  subject TEXT NOT NULL,
  period TEXT NOT NULL,
  period_start INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  cost_usd REAL NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (id, subject, period, period_start)
);
CREATE INDEX budget_reservations_by_counter ON budget_reservations(subject, period, period_start, expires_at);
`
  },
  {
    version: 20,
    description: 'stored secrets are sealed (AES-256-GCM, storage/secret-keyring.ts): the ids of the keys in use, which a boot compares with its keys; push configs stored before are marked to be sealed at the next boot (kid plain)',
    sql: `
CREATE TABLE secret_keys (
  kid TEXT PRIMARY KEY,
  recorded_at INTEGER NOT NULL
);
INSERT INTO secret_keys (kid, recorded_at) SELECT 'plain', 0 WHERE EXISTS (SELECT 1 FROM a2a_push_configs);
`
  },
  {
    version: 21,
    description: 'a bus event carries its owner\'s scopes, which a task it starts carries (metadata.owner_scopes) and its agent\'s host calls are held to',
    sql: `
ALTER TABLE bus_events ADD COLUMN owner_scopes TEXT;
`
  }
]
