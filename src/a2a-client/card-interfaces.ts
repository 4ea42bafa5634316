import type { AgentCard } from '@a2a-js/sdk'

/** The protocol bindings the host calls external agents with (the SDK's JSON-RPC and HTTP+JSON transports; not gRPC). */
export const CLIENT_BINDINGS: readonly string[] = ['JSONRPC', 'HTTP+JSON']

/**
 * Why the interfaces of a card may not be called, or undefined when they may. The card URL is the
 * operator's (trusted); the interface URLs are the remote's: each interface of a binding the host
 * speaks must be http(s) on the card URL's own host or on one of `allowedHosts`, and not plain
 * http when the card came over https. A card that fails is not used at all, so that a remote
 * cannot point the host's credentials and requests at another machine (SSRF).
 */
export function interfaceRefusal (card: AgentCard, cardUrl: string, allowedHosts: readonly string[]): string | undefined {
  const cardAt = new URL(cardUrl)
  const usable = (card.supportedInterfaces ?? []).filter((i) => CLIENT_BINDINGS.includes(String(i.protocolBinding).toUpperCase()))
  if (usable.length === 0) return `its card offers no ${CLIENT_BINDINGS.join(' or ')} interface (A2A v1.0)`
  for (const { url } of usable) {
    let target: URL
    try {
      target = new URL(url)
    } catch {
      return `its card names an interface URL that is not a URL: ${JSON.stringify(url)}`
    }
    if (!['http:', 'https:'].includes(target.protocol)) return `its card names an interface that is not http(s): ${url}`
    if (cardAt.protocol === 'https:' && target.protocol === 'http:') return `its card, fetched over https, names a plain http interface: ${url}`
    if (target.host !== cardAt.host && !allowedHosts.includes(target.host)) {
      return `its card names an interface on another host (${target.host}) than the card's (${cardAt.host}); list it in allowed_hosts to allow it`
    }
  }
  return undefined
}
