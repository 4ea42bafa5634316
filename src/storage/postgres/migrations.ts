/**
 * The PostgreSQL schema, as numbered steps (`DATABASE_URL=postgres://...`). The same tables as the
 * SQLite schema (`storage/sqlite/migrations.ts`) in PostgreSQL's terms: identity columns, `bigint`
 * milliseconds where SQLite keeps integers, `text` where bytes must come back as they went in
 * (JSON answers, audit rows that are hashed), `tsvector` columns with GIN indexes for recall.
 * Append a step to change it; never edit one that has shipped.
 */
export const PG_MIGRATIONS: ReadonlyArray<{ version: number, description: string, sql: string }> = [
  {
    version: 1,
    description: 'sessions, interactions, values and their search vectors, events, the audit log, runs and their journal, tasks, API keys, the narrator\'s place, the event bus, A2A push configs',
    sql: `
CREATE TABLE sessions (
  session_id text PRIMARY KEY,
  user_id text NOT NULL,
  key_id text,
  created_at text NOT NULL,
  updated_at text NOT NULL
);

CREATE TABLE interactions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  request_id text NOT NULL,
  session_id text NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  agent_id text NOT NULL,
  agent_request_id text NOT NULL,
  root_request_id text NOT NULL,
  parent_request_id text,
  timestamp text NOT NULL,
  status text NOT NULL,
  input text NOT NULL,
  output text NOT NULL,
  -- a tsvector holds at most 1 MiB of words: the first 64 Ki characters of each side are searched
  search tsvector GENERATED ALWAYS AS (to_tsvector('simple', left(input, 65536) || ' ' || left(output, 65536))) STORED
);
CREATE INDEX interactions_by_session ON interactions(session_id, id);
CREATE INDEX interactions_search ON interactions USING gin(search);

CREATE TABLE session_values (
  session_id text NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  key text NOT NULL,
  value text NOT NULL,
  updated_at text NOT NULL,
  -- renewed by every store: equal recall hits come back the last stored first, as on SQLite
  stored_seq bigint GENERATED ALWAYS AS IDENTITY,
  search tsvector GENERATED ALWAYS AS (to_tsvector('simple', left(key || ' ' || value, 131072))) STORED,
  PRIMARY KEY (session_id, key)
);
CREATE INDEX session_values_search ON session_values USING gin(search);

CREATE TABLE events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL,
  kind text NOT NULL,
  type text NOT NULL,
  source text NOT NULL,
  time text NOT NULL,
  visibility text NOT NULL DEFAULT 'internal',
  session_id text,
  request_id text,
  trace_id text,
  task_id text,
  owner_key text,
  body text NOT NULL
);
CREATE INDEX events_by_session ON events(session_id, seq);
CREATE INDEX events_by_request ON events(request_id, seq);
CREATE INDEX events_by_type ON events(type, seq);
CREATE INDEX events_by_task ON events(task_id, seq) WHERE task_id IS NOT NULL;
CREATE INDEX events_by_owner ON events(owner_key, seq) WHERE owner_key IS NOT NULL;

CREATE TABLE audit_log (
  audit_id bigint PRIMARY KEY,
  timestamp text NOT NULL,
  actor text NOT NULL,
  claimed_user text,
  action text NOT NULL,
  resource text NOT NULL,
  success smallint NOT NULL,
  request_id text,
  root_request_id text,
  trace_id text,
  details text,
  key_id text,
  previous_hash text NOT NULL,
  integrity_hash text NOT NULL
);
CREATE TABLE audit_head (
  id smallint PRIMARY KEY CHECK (id = 1),
  audit_id bigint NOT NULL,
  integrity_hash text NOT NULL
);
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

CREATE TABLE runs (
  run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  request_id text NOT NULL UNIQUE,
  envelope_hash text NOT NULL,
  envelope text NOT NULL,
  -- the envelope's own request_id (request_id above is scoped to the caller)
  wire_id text GENERATED ALWAYS AS ((envelope::jsonb)->>'request_id') STORED,
  session_id text NOT NULL,
  agent_id text NOT NULL,
  main_stream_id text NOT NULL,
  state text NOT NULL,
  end_reason text,
  owner_instance text NOT NULL,
  owner_pid integer NOT NULL,
  owner_key text,
  lease_token text,
  lease_expires_at bigint,
  cancel_requested smallint NOT NULL DEFAULT 0,
  started_at bigint NOT NULL,
  ended_at bigint,
  response_status integer,
  response text
);
CREATE INDEX runs_by_end ON runs(state, ended_at);
CREATE INDEX runs_by_lease ON runs(lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_by_agent ON runs(agent_id, owner_key, started_at, run_id);
CREATE INDEX runs_by_wire_id ON runs(wire_id);
CREATE INDEX runs_by_session ON runs(session_id);

-- one row per flush of a run: its frames, newline-separated, the last one's ord and how many
CREATE TABLE journal (
  run_id bigint NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  ord integer NOT NULL,
  count integer NOT NULL,
  frames text NOT NULL,
  PRIMARY KEY (run_id, ord)
);

CREATE TABLE tasks (
  id text PRIMARY KEY,
  type text NOT NULL,
  status text NOT NULL,
  priority double precision NOT NULL,
  owner text,
  attempt integer NOT NULL,
  dependency_ids text[] NOT NULL,
  created_at timestamptz NOT NULL,
  available_at timestamptz NOT NULL,
  lease_expires_at timestamptz,
  conversation_id text,
  owner_key text,
  node text NOT NULL,
  -- insertion order: the tie-break of tasks created in the same millisecond
  created_seq bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX tasks_claim ON tasks(type, priority DESC, created_at, created_seq) WHERE status = 'PENDING';
CREATE INDEX tasks_lease ON tasks(lease_expires_at) WHERE status = 'IN_PROGRESS';
CREATE INDEX tasks_conversation ON tasks(conversation_id, created_at) WHERE conversation_id IS NOT NULL;
CREATE INDEX tasks_by_owner_key ON tasks(owner_key, created_at) WHERE owner_key IS NOT NULL;
CREATE INDEX tasks_order ON tasks(created_at, created_seq);

CREATE TABLE api_keys (
  id text PRIMARY KEY,
  name text NOT NULL,
  salt text NOT NULL,
  hash text NOT NULL,
  scopes text NOT NULL,
  agents text,
  created_at text NOT NULL,
  expires_at text,
  revoked_at text
);
CREATE INDEX api_keys_name ON api_keys(name);

CREATE TABLE narrator_state (
  id smallint PRIMARY KEY CHECK (id = 1),
  seq bigint NOT NULL
);
INSERT INTO narrator_state VALUES (1, 0);
CREATE TABLE narrations (
  session_id text PRIMARY KEY,
  seq bigint NOT NULL
);

CREATE TABLE bus_events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE,
  type text NOT NULL,
  key text NOT NULL,
  visibility text NOT NULL,
  priority integer NOT NULL,
  target_agents text,
  data text NOT NULL,
  source text NOT NULL,
  owner_key text,
  trace_id text,
  published_at bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX bus_events_by_key ON bus_events(key, expires_at);
CREATE INDEX bus_events_by_expiry ON bus_events(expires_at);
CREATE TABLE bus_subscriptions (
  id text PRIMARY KEY,
  agent text,
  patterns text NOT NULL,
  filter text,
  max_attempts integer NOT NULL,
  backoff_ms integer NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE TABLE bus_deliveries (
  subscription_id text NOT NULL REFERENCES bus_subscriptions(id) ON DELETE CASCADE,
  event_seq bigint NOT NULL REFERENCES bus_events(seq) ON DELETE CASCADE,
  priority integer NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  due_at bigint NOT NULL,
  lease_owner text,
  lease_expires_at bigint,
  last_error text,
  PRIMARY KEY (subscription_id, event_seq)
);
CREATE INDEX bus_deliveries_next ON bus_deliveries(subscription_id, priority DESC, event_seq);
CREATE INDEX bus_deliveries_by_event ON bus_deliveries(event_seq);
CREATE TABLE bus_dead_letters (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id text NOT NULL,
  event_seq bigint NOT NULL,
  event text NOT NULL,
  owner_key text,
  attempts integer NOT NULL,
  last_error text NOT NULL,
  dead_at bigint NOT NULL
);

CREATE TABLE a2a_push_configs (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_key text NOT NULL REFERENCES runs(request_id) ON DELETE CASCADE,
  id text NOT NULL,
  task_id text NOT NULL,
  agent_id text NOT NULL,
  owner_key text,
  created_by text NOT NULL,
  url text NOT NULL,
  token text NOT NULL,
  auth_scheme text,
  auth_credentials text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  cursor integer NOT NULL,
  delivered integer NOT NULL DEFAULT 0,
  attempts integer NOT NULL DEFAULT 0,
  last_status integer,
  last_error text,
  next_attempt_at bigint NOT NULL,
  state text NOT NULL DEFAULT 'active',
  lease_token text,
  lease_expires_at bigint,
  UNIQUE (run_key, id)
);
CREATE INDEX a2a_push_due ON a2a_push_configs(next_attempt_at) WHERE state = 'active';
CREATE INDEX a2a_push_by_owner ON a2a_push_configs(owner_key, seq);

-- rate-limit windows shared by every instance: one row per limit and key, its window starting at
-- the first hit after the last one ended (as in @fastify/rate-limit's in-process store)
CREATE TABLE rate_limits (
  limit_name text NOT NULL,
  key text NOT NULL,
  window_start bigint NOT NULL,
  expires_at bigint NOT NULL,
  hits integer NOT NULL,
  PRIMARY KEY (limit_name, key)
);
CREATE INDEX rate_limits_by_expiry ON rate_limits(expires_at);

-- the per-caller stream quota across instances: each instance's lease (renewed by its heartbeat)
-- and the slots held under it; a lapsed lease's slots count no more
CREATE TABLE stream_leases (
  holder text PRIMARY KEY,
  instance text NOT NULL,
  lease_expires_at bigint NOT NULL
);
CREATE TABLE stream_slots (
  id text PRIMARY KEY,
  holder text NOT NULL REFERENCES stream_leases(holder) ON DELETE CASCADE,
  caller text NOT NULL,
  acquired_at bigint NOT NULL
);
CREATE INDEX stream_slots_by_caller ON stream_slots(caller);
CREATE INDEX stream_slots_by_holder ON stream_slots(holder);
`
  },
  {
    version: 2,
    description: 'runs.wire_id given by the host, not computed from the envelope (jsonb refuses a \\u0000 escape that JSON allows)',
    sql: `
ALTER TABLE runs ALTER COLUMN wire_id DROP EXPRESSION;
`
  },
  {
    version: 3,
    description: 'a bus event carries its owner\'s agent list (JSON; null: any agent), so the work it starts is held to it',
    sql: `
ALTER TABLE bus_events ADD COLUMN owner_agents text;
`
  },
  {
    version: 4,
    description: 'runs waiting for a person (human in the loop): the first request, the interrupts asked and their answers, the host calls replayed after an answer; expires_at, when the last open question expires (pruned after JOURNAL_RETENTION_MS past it)',
    sql: `
CREATE TABLE waiting_runs (
  run_key text PRIMARY KEY,
  request_id text NOT NULL,
  owner_key text NOT NULL,
  session_id text NOT NULL,
  agent_id text NOT NULL,
  state text NOT NULL,
  version integer NOT NULL,
  last_run text NOT NULL UNIQUE,
  envelope text NOT NULL,
  interrupts text NOT NULL,
  memo text NOT NULL,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE INDEX waiting_runs_by_session ON waiting_runs(session_id, created_at);
CREATE INDEX waiting_runs_by_request ON waiting_runs(request_id);
`
  },
  {
    version: 5,
    description: 'an interaction\'s search vector is written with it, not generated, so that SESSION_SEARCH=values can leave it out',
    sql: `
ALTER TABLE interactions ALTER COLUMN search DROP EXPRESSION;
`
  },
  {
    version: 6,
    description: 'MCP sessions (their owner, the client\'s initialize, the log level), shared by every instance, and their SSE streams\' events for resumption (Last-Event-ID)',
    sql: `
CREATE TABLE mcp_sessions (
  id text PRIMARY KEY,
  owner text NOT NULL,
  cap_session_id text NOT NULL,
  initialize text NOT NULL,
  level text,
  last_seen bigint NOT NULL
);
CREATE INDEX mcp_sessions_by_owner ON mcp_sessions(owner, last_seen);
CREATE INDEX mcp_sessions_by_last_seen ON mcp_sessions(last_seen);
CREATE TABLE mcp_events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  session_id text NOT NULL REFERENCES mcp_sessions(id) ON DELETE CASCADE,
  stream_id text NOT NULL,
  message text NOT NULL,
  created_at bigint NOT NULL
);
CREATE INDEX mcp_events_by_stream ON mcp_events(session_id, stream_id, seq);
CREATE INDEX mcp_events_by_time ON mcp_events(created_at);
`
  },
  {
    version: 7,
    description: 'tenants: the tenant each API key belongs to (what a key makes is stored under its principal id, which names a tenant other than the default)',
    sql: `
ALTER TABLE api_keys ADD COLUMN tenant text NOT NULL DEFAULT 'default';
CREATE INDEX api_keys_by_tenant ON api_keys(tenant, created_at);
`
  },
  {
    version: 8,
    description: 'model budgets: usage per tenant or key and UTC day or month, and the reservations of backend calls in flight (each with its lease)',
    sql: `
CREATE TABLE budget_counters (
  subject text NOT NULL,
  period text NOT NULL,
  period_start bigint NOT NULL,
  tokens bigint NOT NULL,
  cost_usd double precision NOT NULL,
  PRIMARY KEY (subject, period, period_start)
);
CREATE INDEX budget_counters_by_period ON budget_counters(period, period_start);
CREATE TABLE budget_reservations (
  id text NOT NULL,
  subject text NOT NULL,
  period text NOT NULL,
  period_start bigint NOT NULL,
  tokens bigint NOT NULL,
  cost_usd double precision NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (id, subject, period, period_start)
);
CREATE INDEX budget_reservations_by_counter ON budget_reservations(subject, period, period_start, expires_at);
`
  },
  {
    version: 9,
    description: 'stored secrets are sealed (AES-256-GCM, storage/secret-keyring.ts): the ids of the keys in use, which a boot compares with its keys; push configs stored before are marked to be sealed at the next boot (kid plain)',
    sql: `
CREATE TABLE secret_keys (
  kid text PRIMARY KEY,
  recorded_at bigint NOT NULL
);
INSERT INTO secret_keys (kid, recorded_at) SELECT 'plain', 0 WHERE EXISTS (SELECT 1 FROM a2a_push_configs);
`
  },
  {
    version: 10,
    description: 'a bus event carries its owner\'s scopes, which a task it starts carries (metadata.owner_scopes) and its agent\'s host calls are held to',
    sql: `
ALTER TABLE bus_events ADD COLUMN owner_scopes text;
`
  }
]
