import { createPrivateKey, createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { calculateJwkThumbprint, FlattenedSign, type JWK } from 'jose'
import { AH_ERR_CONFIG_INVALID } from '../errors.js'
import { canonicalJson } from '../storage/canonical-json.js'

/** The JWS algorithms a card is signed with, by the signing key's type. */
export type CardSigningAlgorithm = 'ES256' | 'EdDSA' | 'RS256'

/** One entry of a card's `signatures` (A2A v1.0 `AgentCardSignature`, a flattened JWS without its payload). */
export interface CardSignature {
  /** The base64url JWS protected header: `{ alg, typ: "JOSE", kid }`. */
  protected: string
  /** The base64url signature of the protected header and the card's canonical JSON. */
  signature: string
}

/** Signed cards kept at most: one per agent and per origin the server is reached by (an attacker choosing `Host` headers fills it, never past this). */
const KEPT = 256

/**
 * What a card's signature covers (A2A v1.0 §8.4.1): the card as a client receives it (its JSON), without
 * `signatures`, in RFC 8785 canonical JSON.
 */
export function cardPayload (card: Readonly<Record<string, unknown>>): string {
  const { signatures: _, ...unsigned } = card
  return canonicalJson(unsigned)
}

/** The algorithm a private key signs with, or why it cannot sign a card. */
function algorithmOf (key: KeyObject): CardSigningAlgorithm | string {
  if (key.asymmetricKeyType === 'ed25519') return 'EdDSA'
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve
    return curve === 'prime256v1' ? 'ES256' : `an EC key on ${String(curve)}: use P-256 (ES256)`
  }
  if (key.asymmetricKeyType === 'rsa') {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0
    return bits >= 2048 ? 'RS256' : `an RSA key of ${bits} bits: use 2048 or more`
  }
  return `a ${String(key.asymmetricKeyType)} key: use an EC P-256 (ES256), Ed25519 (EdDSA) or RSA (RS256) key`
}

/** The private key in `text`: PEM (PKCS#8, or SEC1 and PKCS#1 as openssl writes them) or a JWK with its private part. */
function privateKeyOf (text: string): KeyObject {
  if (text.trimStart().startsWith('-----BEGIN')) return createPrivateKey({ key: text, format: 'pem' })
  const jwk = JSON.parse(text) as unknown
  if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) throw new Error('neither a PEM private key nor a JWK object')
  if ('keys' in jwk) throw new Error('a JWK set: give one private JWK')
  return createPrivateKey({ key: jwk as JsonWebKey, format: 'jwk' })
}

/**
 * Signs the agent cards this server serves (A2A v1.0 §8.4): a detached JWS over the card's canonical
 * JSON ({@link cardPayload}), added to its `signatures`. A card is signed once: its signature is kept
 * by payload, so serving the same card again costs no signing.
 */
export class CardSigner {
  /** The key's id, the protected header's `kid`. */
  readonly kid: string
  readonly alg: CardSigningAlgorithm
  /** The public key (JWK with `kid`, `alg` and `use: "sig"`): what a client pins to check the cards. */
  readonly publicJwk: JWK
  readonly #key: KeyObject
  readonly #kept = new Map<string, Promise<CardSignature>>()

  private constructor (key: KeyObject, alg: CardSigningAlgorithm, kid: string, publicJwk: JWK) {
    this.#key = key
    this.alg = alg
    this.kid = kid
    this.publicJwk = { ...publicJwk, kid, alg, use: 'sig' }
  }

  /**
   * The signer of A2A_CARD_SIGNING_KEY_FILE.
   * @param path a private key: PEM (PKCS#8, or SEC1 and PKCS#1) or a JWK file; EC P-256 signs ES256, Ed25519 EdDSA, RSA (2048 bits or more) RS256
   * @param kid the `kid` of the signatures; empty: the key's JWK thumbprint (RFC 7638)
   * @throws AH_ERR_CONFIG_INVALID naming the setting when the file cannot be read or its key cannot sign
   */
  static async load (path: string, kid = ''): Promise<CardSigner> {
    const fail = (why: string, cause?: unknown): never => {
      throw new AH_ERR_CONFIG_INVALID(`env/A2A_CARD_SIGNING_KEY_FILE ${path}: ${why}`, ...(cause !== undefined ? [{ cause }] : []))
    }
    let text = ''
    try {
      text = readFileSync(path, 'utf8')
    } catch (err) {
      fail(`cannot be read: ${(err as Error).message}`, err)
    }
    let key: KeyObject | undefined
    try {
      key = privateKeyOf(text)
    } catch (err) {
      fail(`is not a private key (PEM or JWK): ${(err as Error).message}`, err)
    }
    const alg = algorithmOf(key as KeyObject)
    if (alg !== 'ES256' && alg !== 'EdDSA' && alg !== 'RS256') return fail(`holds ${alg}`)
    const publicJwk = createPublicKey(key as KeyObject).export({ format: 'jwk' }) as JWK
    return new CardSigner(key as KeyObject, alg, kid !== '' ? kid : await calculateJwkThumbprint(publicJwk), publicJwk)
  }

  /**
   * The card as served, signed: its JSON (`AgentCard.toJSON`, exactly what the client receives) with
   * this key's signature added to its `signatures`.
   */
  async sign (card: Readonly<Record<string, unknown>>): Promise<Record<string, unknown>> {
    const payload = cardPayload(card)
    let signature = this.#kept.get(payload)
    if (signature === undefined) {
      signature = this.#signature(payload)
      if (this.#kept.size >= KEPT) this.#kept.delete(this.#kept.keys().next().value as string)
      this.#kept.set(payload, signature)
    }
    const signatures = Array.isArray(card.signatures) ? card.signatures as unknown[] : []
    return { ...card, signatures: [...signatures, await signature] }
  }

  async #signature (payload: string): Promise<CardSignature> {
    const jws = await new FlattenedSign(new TextEncoder().encode(payload))
      .setProtectedHeader({ alg: this.alg, typ: 'JOSE', kid: this.kid })
      .sign(this.#key)
    return { protected: jws.protected as string, signature: jws.signature }
  }
}
