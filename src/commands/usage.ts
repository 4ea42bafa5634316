/** What `agent-host --help` prints, and what a command given wrong arguments prints after its error. */
export const USAGE = `usage: agent-host <command>
       agent-host --version | -v                print the version
       agent-host --help | -h                   print this

commands:
  audit verify [--data-dir DIR] [--checkpoint JSON]... [--checkpoint-file FILE]...
                                                check the audit log (DATA_DIR's, or DATABASE_URL's) against
                                                its checkpoints and those kept elsewhere (with PostgreSQL:
                                                each instance's DATA_DIR/audit-checkpoints.jsonl, given
                                                with --checkpoint-file) (exit 0 when intact, 1 when not, 2
                                                when there is no log); needs AUDIT_KEY for a keyed log
  backup --to DIR [--data-dir DIR] [--json]     copy DATA_DIR into DIR (new or empty) while the server
                                                runs: the database through SQLite's online backup, the
                                                task graph under its lock, the audit checkpoints, the
                                                workspaces; prints what it copied and its point in time
                                                (--json: the manifest it writes, DIR/backup-manifest.json)
                                                (exit 0 when done, 1 when it failed and DIR is as it was,
                                                2 when refused); with DATABASE_URL it copies DATA_DIR's
                                                files only and exits 3: the database is pg_dump's
                                                (docs/backups.md)
  worker --type T [--concurrency N] [--data-dir DIR]
                                                work the task graph as task agent T until SIGTERM/SIGINT
  keys create --name N --scopes s1,s2 [--agents a,b] [--tenant T] [--expires 30d|ISO date]
                                                make an API key and print it (once: only its hash is kept);
                                                --tenant: the key belongs to tenant T (default: default)
  keys list [--tenant T] [--json]               the keys, under a header: id, name, tenant, scopes, agents, created,
                                                expiry, state (active, expired, or revoked and when; never
                                                the key); columns aligned on a terminal, tab-separated when
                                                piped; --json: one JSON array
  keys revoke ID|NAME                           revoke a key, by its id or its name (a name is one key's
                                                among those not revoked: keys create refuses a name taken)
                                                (keys live in DATABASE_URL's database when it is set, else
                                                in DATA_DIR's; every change is audited)
  secrets rotate                                seal every stored secret (A2A push tokens and credentials)
                                                again with SECRETS_KEY, opening those of the old keys given
                                                in SECRETS_KEYS_RETIRED, in one transaction; prints how many
                                                it re-sealed; then the server needs SECRETS_KEY alone
                                                (exit 0 when done, 1 when a value's key is not given and
                                                nothing changed, 2 without SECRETS_KEY)
  new agent NAME [--stream | --task | --contract]
                                                write a working agent, AGENTS_DIR/NAME/index.ts (default
                                                agents/), and its test, test/agents/NAME.test.ts: a JSON
                                                agent; --stream an SSE agent; --task a task agent;
                                                --contract a contract agent (a task agent too); run it
                                                from the project's root; it never overwrites

Settings come from the environment as for the server (DATA_DIR, AGENTS_DIR, TASK_STORE, TASK_*).
On a terminal, long work (audit verify, database migrations) shows its progress on stderr.`
