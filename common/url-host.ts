// The host to dial for a URL. WHATWG URLs keep an IPv6 literal in its brackets ("[::1]"); sockets
// and TLS want it bare.
export function dialHost(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, "");
}
