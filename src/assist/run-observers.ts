import type { DeliveryMode } from '../protocol/manifest.js'
import type { RunLogger } from './run.js'

/** The model of usage whose model is not known: the agent reported it itself, or its backend does not name one (the local agent). */
export const UNKNOWN_MODEL = 'unknown'

/** Tokens a run used in one backend call, or in one `usage()` report of the agent's own. */
export interface RunUsage {
  /** The agent's manifest name. */
  agent: string
  /** The tenant of the run's caller or the task's owner (`storage/tenants.ts:tenantOf`); absent: the default tenant. */
  tenant?: string
  /** The model the backend called, or {@link UNKNOWN_MODEL}. */
  model: string
  input: number
  output: number
  /** In US dollars; absent when the agent reported its usage without a cost. */
  cost?: number
}

/**
 * What the engine tells an observer (the metrics) about the runs this process runs, as it happens.
 * An observer must not throw (a throw is logged, and the run goes on).
 */
export interface RunObserver {
  /** The run's first packet was journaled and handed to its clients, `seconds` after the run started. */
  firstPacket?(run: { agent: string, mode: DeliveryMode, seconds: number }): void
  /**
   * Tokens were used. Each token is told once: a backend's call with its model; a `usage()` report
   * the agent makes while its backend hands it that call's usage (`capBridge`) repeats it and is not told.
   */
  usage?(usage: RunUsage): void
  /**
   * The run ended with an ERROR packet (a FATAL one, or the TRANSIENT of a timeout, a shutdown or
   * busy storage) and was recorded; `code` is its stream error code (`STREAM_ERROR_CODES`).
   */
  failed?(run: { agent: string, mode: DeliveryMode, code: string }): void
}

type Events = { [K in keyof RunObserver]-?: Parameters<NonNullable<RunObserver[K]>>[0] }

/** The engine's observers: each is told every event, and one that throws is logged, not propagated into the run. */
export class RunObservers {
  readonly #observers: RunObserver[] = []
  readonly #log: RunLogger

  constructor (log: RunLogger) {
    this.#log = log
  }

  add (observer: RunObserver): void {
    this.#observers.push(observer)
  }

  tell<K extends keyof Events> (event: K, value: Events[K]): void {
    for (const observer of this.#observers) {
      try {
        (observer[event] as ((value: Events[K]) => void) | undefined)?.call(observer, value)
      } catch (err) {
        this.#log.error({ err, event }, 'a run observer failed')
      }
    }
  }
}
