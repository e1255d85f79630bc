// TLS session resumption for agents that reconnect: a resumed handshake carries no signature on
// either side (the node's certificate, verified at the first handshake, travels inside the
// ticket), so a storm of reconnects after a restart costs a fraction of full handshakes. Every
// session open still checks the credential in the database (revoked, expired, disabled), so a
// resumed connection authorizes nothing a full one would not.
//
// Ticket keys are derived from the CA's private key and the current epoch: every replica sharing
// the certificates directory derives the same (a ticket from one resumes on another, and across a
// restart), a replaced CA changes them, and they change every epoch (older tickets then fall back
// to a full handshake). The key material never leaves memory.
import { hkdfSync, type KeyObject } from "node:crypto";

/** How long one set of ticket keys serves, and so the longest a ticket can resume. */
export const ticketEpochMs = 12 * 60 * 60 * 1000;

/** Node's ticket key layout: 16 bytes name, 16 bytes HMAC secret, 16 bytes AES key. */
const ticketKeyBytes = 48;

export function sessionTicketKeys(caKey: KeyObject, nowMs: number): Buffer {
  const epoch = Math.floor(nowMs / ticketEpochMs);
  const secret = caKey.export({ type: "pkcs8", format: "der" });
  return Buffer.from(hkdfSync("sha256", secret, Buffer.from(`epoch ${epoch}`), "modelforge tls session tickets v1", ticketKeyBytes));
}
