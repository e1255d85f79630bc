// Whether a URL names this machine by a loopback address: where plain http is allowed for an
// identity provider (a provider on the same machine, as in tests), by the server and the CLI alike.
export function isLoopbackUrl(url: URL): boolean {
  return url.hostname === "localhost" || url.hostname === "[::1]" || /^127\./.test(url.hostname);
}
