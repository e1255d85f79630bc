// What a failed TLS handshake is worth telling the operator. Most are noise anyone can make (port
// probes, plain HTTP, scanners) and stay at debug; one matters: a client that sent its hello and
// then gave up on our certificate, which is what every agent does once the CA it pinned at
// enrollment has been replaced (say, a regenerated certs directory). With TLS 1.3 the client
// decides before it sends its own certificate, so the server never sees that certificate: all it
// can say is who gave up, and why that usually happens.

export interface HandshakeFailure {
  /** The Node error code (e.g. ECONNRESET, ERR_SSL_TLSV1_ALERT_UNKNOWN_CA). */
  code: string | undefined;
  /** Bytes the client sent before the failure. */
  bytesRead: number;
}

export type HandshakeVerdict = { level: "debug" | "warn"; reason: string };

/** OpenSSL alerts a client sends when it refuses the server's certificate. */
const CERTIFICATE_ALERT =
  /^ERR_SSL_(TLSV1|SSLV3)_ALERT_(UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|DECRYPT_ERROR|UNSUPPORTED_CERTIFICATE)$/;

export const NOT_TRUSTED =
  "the client gave up after receiving this server's certificate: most likely it does not trust this CA (an agent enrolled under a previous CA must re-enroll with a recovery token), else it timed out";

export function judgeHandshakeFailure(f: HandshakeFailure): HandshakeVerdict {
  if (f.bytesRead === 0) return { level: "debug", reason: "closed before sending anything (a port probe)" };
  if (f.code !== undefined && CERTIFICATE_ALERT.test(f.code)) return { level: "warn", reason: `${NOT_TRUSTED} (${f.code})` };
  // Node's own TLS client (our agent) does not send an alert: it verifies, then resets.
  if (f.code === "ECONNRESET") return { level: "warn", reason: NOT_TRUSTED };
  return { level: "debug", reason: f.code ?? "unknown" };
}
