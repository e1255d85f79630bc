// The validity period of the agent's certificate, for the renewal rule (../session/timing.ts renewalDue).
import { X509Certificate } from "node:crypto";

export interface Validity {
  /** notBefore and notAfter, in milliseconds since the epoch. */
  from: number;
  to: number;
}

/**
 * Reads a certificate's validity, parsing each certificate once: every heartbeat asks, and every
 * session of a fleet reconnecting at once used to parse it again (about a millisecond under
 * OpenSSL 3 on a loaded machine; bench/heartbeats.ts RESTARTS, load generator profile). A new
 * certificate (renewed, or another identity) is parsed when first asked about.
 */
export function validityReader(): (certPem: string) => Validity {
  let last: (Validity & { certPem: string }) | undefined;
  return (certPem) => {
    if (last?.certPem !== certPem) {
      const cert = new X509Certificate(certPem);
      last = { certPem, from: Date.parse(cert.validFrom), to: Date.parse(cert.validTo) };
    }
    return { from: last.from, to: last.to };
  };
}
