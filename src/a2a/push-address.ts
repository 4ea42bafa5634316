import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import ipaddr from 'ipaddr.js'
import { AH_ERR_PUSH_ADDRESS_REFUSED } from '../errors.js'

const IPV4_COMPATIBLE = ipaddr.IPv6.parseCIDR('::/96')

/**
 * Why `address` (an IPv4 or IPv6 literal) is not a public unicast address a push may be sent to,
 * or undefined when it is. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
 * Everything ipaddr.js does not class as plain `unicast` is refused: loopback, private (RFC 1918),
 * carrier-grade NAT (100.64/10), link-local, unique-local, unspecified, multicast, broadcast,
 * reserved and documentation ranges, and the transition ranges that can tunnel to any of them
 * (6to4, Teredo, NAT64), and IPv4-compatible IPv6 (`::/96` but `::` and `::1`: `::7f00:1` is
 * `::127.0.0.1`), deprecated by RFC 4291 and reaching the IPv4 address it carries on stacks that
 * still tunnel it.
 */
export function nonPublicRange (address: string): string | undefined {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6
  try {
    // ipaddr.js reads an IPv6 address with a dotted tail as IPv4-mapped (`::127.0.0.1` as `::ffff:7f00:1`): WHATWG URL's parser reads it as written
    parsed = ipaddr.process(isIP(address) === 6 ? new URL(`http://[${address}]/`).hostname.slice(1, -1) : address)
  } catch {
    return 'not an IP address'
  }
  const range = parsed.range()
  if (parsed.kind() === 'ipv6' && range !== 'unspecified' && range !== 'loopback' && (parsed as ipaddr.IPv6).match(IPV4_COMPATIBLE)) return 'ipv4Compatible'
  return range === 'unicast' ? undefined : range
}

/** Why a connection to `address` (made for `host`) must not be used, or undefined when it may (always, with `allowPrivate`). */
export function addressRefusal (host: string, address: string, allowPrivate: boolean): Error | undefined {
  if (allowPrivate) return undefined
  const range = nonPublicRange(address)
  return range === undefined ? undefined : new AH_ERR_PUSH_ADDRESS_REFUSED(host, address, range)
}

/** `url`'s host, without an IPv6 literal's brackets. */
export function hostOf (url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
}

/**
 * Check that `url`'s host resolves only to public unicast addresses (every one of them: a name with
 * one private address among public ones is refused too). Nothing is checked when `allowPrivate`.
 * @throws AH_ERR_PUSH_ADDRESS_REFUSED (its message names the address, its range and the setting)
 *   for the first non-public address; the resolver's error when the host does not resolve
 */
export async function checkPushHost (url: URL, allowPrivate: boolean): Promise<void> {
  if (allowPrivate) return
  const host = hostOf(url)
  const addresses = isIP(host) !== 0
    ? [host]
    : await new Promise<string[]>((resolve, reject) => {
      dnsLookup(host, { all: true, verbatim: true }, (err, found) => {
        if (err !== null) reject(err)
        else resolve(found.map((a) => a.address))
      })
    })
  for (const address of addresses) {
    const refused = addressRefusal(host, address, false)
    if (refused !== undefined) throw refused
  }
}

/**
 * A `lookup` for `http.request` that refuses a name resolving to any non-public address (unless
 * `allowPrivate`), so a name that resolved to a public address when the config was made and to a
 * private one now (DNS rebinding) is refused before a connection is made.
 */
export function guardedLookup (allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err !== null) { callback(err, ''); return }
      for (const { address } of addresses) {
        const refused = addressRefusal(hostname, address, allowPrivate)
        if (refused !== undefined) { callback(refused, ''); return }
      }
      if (options.all === true) callback(null, addresses)
      else callback(null, (addresses[0] as LookupAddress).address, (addresses[0] as LookupAddress).family)
    })
  }
}
