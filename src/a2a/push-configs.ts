import { createHash, randomBytes, randomUUID } from 'node:crypto'
import type { TaskPushNotificationConfig } from '@a2a-js/sdk'
import { RequestMalformedError, TaskNotFoundError } from '@a2a-js/sdk/errors'
import type { Identity } from '../storage/api-keys.js'
import { AH_ERR_PUSH_ADDRESS_REFUSED } from '../errors.js'
import type { ServiceRequest } from '../protocol/envelope.js'
import type { A2APushStore, PushConfigChanges, PushConfigRecord } from '../storage/a2a-push.js'
import type { RunRecord } from '../storage/runs.js'
import { checkPushHost, hostOf } from './push-address.js'

/** Configs one task may have. */
export const MAX_CONFIGS_PER_TASK = 10

const CONFIG_ID = /^[A-Za-z0-9._~-]{1,128}$/
/** RFC 9110's token: an auth scheme. */
const SCHEME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$/
/** What a header value may hold: visible ASCII (and spaces, inside credentials). */
const TOKEN_VALUE = /^[\x21-\x7e]{1,1024}$/
const CREDENTIALS_VALUE = /^[\x20-\x7e]{1,4096}$/

/** A config a caller sent, checked: its URL is one a push may be sent to. Empty `id` and `token` are the server's to make. */
export interface CheckedPushConfig {
  id: string
  url: string
  token: string
  authentication: { scheme: string, credentials: string } | undefined
}

export interface PushConfigsOptions {
  store: A2APushStore
  /** A task's configs changed with their audit row, in one transaction. */
  changes: PushConfigChanges
  /** A2A_PUSH_ALLOW_PRIVATE: URLs resolving to non-public addresses are allowed. */
  allowPrivate: boolean
  /** Told when a config was saved (the delivery loop looks at once). */
  saved: () => void
}

/**
 * The A2A push notification configs of tasks (the A2A methods `Create`/`Get`/`List`/`Delete
 * TaskPushNotificationConfig`, and `SendMessage`'s `configuration.taskPushNotificationConfig`).
 * The caller has already found the task (its own, or an admin's anyone's); this checks what it
 * sent and stores it. A config's URL must be an absolute http(s) URL whose host resolves only to
 * public addresses (unless A2A_PUSH_ALLOW_PRIVATE); its id and token, when absent, are made here,
 * so every update is signed with a token its receiver can learn (the config's answer, or List).
 */
export class PushConfigs {
  readonly #o: PushConfigsOptions

  constructor (options: PushConfigsOptions) {
    this.#o = options
  }

  /**
   * Check a config as a caller sent it.
   * @throws RequestMalformedError naming what is wrong (a URL refused as non-public names A2A_PUSH_ALLOW_PRIVATE)
   */
  async check (config: TaskPushNotificationConfig): Promise<CheckedPushConfig> {
    const bad = (what: string): never => { throw new RequestMalformedError(`Push notification config: ${what}`) }
    if (config.id !== '' && !CONFIG_ID.test(config.id)) bad('id must be 1 to 128 letters, digits, ".", "_", "~" or "-" (or absent: the server makes one)')
    if (config.token !== '' && !TOKEN_VALUE.test(config.token)) bad('token must be 1 to 1024 visible ASCII characters (or absent: the server makes one)')
    const { scheme = '', credentials = '' } = config.authentication ?? {}
    if ((scheme !== '' || credentials !== '') && (!SCHEME.test(scheme) || !CREDENTIALS_VALUE.test(credentials))) {
      bad('authentication needs a scheme (an HTTP auth scheme such as Bearer) and credentials (printable ASCII, one line)')
    }
    let url: URL
    try {
      url = new URL(config.url)
    } catch {
      return bad(`url must be an absolute http or https URL (got "${config.url.slice(0, 200)}")`)
    }
    if ((url.protocol !== 'http:' && url.protocol !== 'https:') || config.url.length > 2048) bad('url must be an absolute http or https URL of at most 2048 characters')
    if (url.username !== '' || url.password !== '') bad('url must not carry credentials: send them as authentication')
    try {
      await checkPushHost(url, this.#o.allowPrivate)
    } catch (err) {
      if (err instanceof AH_ERR_PUSH_ADDRESS_REFUSED) bad(`url refused: ${err.message} (${err.code})`)
      bad(`url's host ${hostOf(url)} does not resolve (${(err as Error).message})`)
    }
    return { id: config.id, url: url.href, token: config.token, authentication: scheme !== '' ? { scheme, credentials } : undefined }
  }

  /**
   * Store a checked config for the task `record` (a new one, or the task's config of the same id
   * replaced). Made by `SendMessage` (`from: 'start'`: its first update is the task as submitted,
   * and a config without id gets one made from its URL, so a message sent again is the same
   * config), or later (`from: 'now'`: the task as it stands, then the updates after it).
   * @throws RequestMalformedError when the task has MAX_CONFIGS_PER_TASK configs already
   */
  async save (record: RunRecord, config: CheckedPushConfig, who: Identity, from: 'start' | 'now'): Promise<TaskPushNotificationConfig> {
    const envelope = JSON.parse(record.envelope) as ServiceRequest
    const id = config.id !== '' ? config.id : from === 'start' ? stableId(config.url) : randomUUID()
    const saved = await this.#o.changes.save(record.request_id, (known) => {
      const same = known.find((c) => c.id === id)
      if (same === undefined && known.length >= MAX_CONFIGS_PER_TASK) {
        throw new RequestMalformedError(`Push notification config: task ${envelope.request_id} has ${MAX_CONFIGS_PER_TASK} configs already (the most it may have): delete one first`)
      }
      return {
        config: {
          run_key: record.request_id,
          id,
          task_id: envelope.request_id,
          agent_id: record.agent_id,
          owner_key: record.owner_key,
          created_by: who.id,
          url: config.url,
          // a token left out keeps the one made before: its receiver already verifies with it
          token: config.token !== '' ? config.token : same?.token ?? randomBytes(32).toString('base64url'),
          auth_scheme: config.authentication?.scheme ?? null,
          auth_credentials: config.authentication?.credentials ?? null
        },
        audit: { actor: who.id, action: same === undefined ? 'a2a.push.create' : 'a2a.push.update', resource: record.agent_id, success: true, request_id: envelope.request_id, details: { config: id, host: new URL(config.url).host } }
      }
    }, from, Date.now())
    this.#o.saved()
    return wire(saved)
  }

  /**
   * The task's config `id`.
   * @throws TaskNotFoundError when the task has none of that id
   */
  async get (record: RunRecord, id: string): Promise<TaskPushNotificationConfig> {
    const found = await this.#o.store.get(record.request_id, id)
    if (found === undefined) throw new TaskNotFoundError(`Push notification config ${id} not found for task ${taskIdOf(record)}`)
    return wire(found)
  }

  /** The task's configs, oldest first. */
  async list (record: RunRecord): Promise<TaskPushNotificationConfig[]> {
    return (await this.#o.store.list(record.request_id)).map(wire)
  }

  /** Delete the task's config `id` (nothing pushed to it from now on); deleting one that is not there is no error, so a retried delete succeeds. */
  async delete (record: RunRecord, id: string, who: Identity): Promise<void> {
    await this.#o.changes.delete(record.request_id, id, { actor: who.id, action: 'a2a.push.delete', resource: record.agent_id, success: true, request_id: taskIdOf(record), details: { config: id } })
  }
}

/** The task id a run is known by: its request id as its caller sent it. */
function taskIdOf (record: RunRecord): string {
  return (JSON.parse(record.envelope) as ServiceRequest).request_id
}

/** A config's id made from its URL: the same URL given with the same message is the same config. */
function stableId (url: string): string {
  const hex = createHash('sha256').update(`a2a-push\u0000${url}`).digest('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${(8 + (parseInt(hex[16] as string, 16) & 3)).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}

/** A stored config as A2A's `TaskPushNotificationConfig`. */
function wire (config: PushConfigRecord): TaskPushNotificationConfig {
  return {
    tenant: '',
    id: config.id,
    taskId: config.task_id,
    url: config.url,
    token: config.token,
    authentication: config.auth_scheme !== null ? { scheme: config.auth_scheme, credentials: config.auth_credentials as string } : undefined
  }
}
