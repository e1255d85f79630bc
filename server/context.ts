// What every handler learns about its caller: the correlation id, a logger bound to it, its IP
// address, and the TLS client certificate if one was presented. Handlers read it with `callOf(ctx)`.
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import http2 from "node:http2";
import type { TLSSocket } from "node:tls";
import type { Logger } from "pino";

/**
 * What authentication reads of a verified client certificate, in the shape of Node's
 * `getPeerCertificate()` fields of the same names.
 */
export interface PresentedCertificate {
  subjectaltname: string | undefined;
  serialNumber: string;
  valid_to: string;
}

export interface Caller {
  correlationId: string;
  log: Logger;
  /** The client certificate, only when it chains to our CA (the TLS layer verified it). */
  certificate: PresentedCertificate | undefined;
  /** Why a presented certificate was not accepted by the TLS layer (e.g. CERT_HAS_EXPIRED). */
  certificateError: string | undefined;
  /** The peer's IP address (what limits and log lines about unauthenticated callers key on). */
  peerAddress?: string | undefined;
  /** The host the client addressed (HTTP/2 :authority, or Host): what a browser's Origin must match. */
  host?: string | undefined;
  /** Ends this call's transport stream at once (./invoke/relay.ts: a caller that stopped reading). */
  abandon?: (reason: AbandonReason) => void;
}

/** Why a call's stream is ended under it: its client left too much unread, is still not done past the deadline, or was deactivated. */
export type AbandonReason = "stalled" | "deadline" | "deactivated";

/**
 * Ends a request's stream without waiting on its client: on HTTP/2 a reset of that stream alone
 * (CANCEL: the only code after which node:http2 destroys the stream without an error, so the
 * write it was blocked on ends as the client's doing, not ours); on HTTP/1.1, where a response
 * cannot be cut short otherwise, the connection closes.
 */
export function abandonerOf(
  req: { socket: { destroy(): void } } | { stream: { close(code: number): void } },
): (reason: AbandonReason) => void {
  if ("stream" in req) {
    const stream = req.stream;
    return () => stream.close(http2.constants.NGHTTP2_CANCEL);
  }
  const socket = req.socket;
  return () => socket.destroy();
}

export const callerKey = createContextKey<Caller | undefined>(undefined, { description: "caller" });

export function callOf(ctx: HandlerContext): Caller {
  const caller = ctx.values.get(callerKey);
  if (caller === undefined) throw new Error("caller context missing: request did not pass the server's adapter");
  return caller;
}

/**
 * Reads the peer's address and verified client certificate off the TLS socket. Only the three
 * fields authentication uses are read: `getPeerCertificate()` would build the whole certificate as
 * an object (three fingerprints, the key's modulus in hex) on every session open and RPC.
 */
export function peerOf(socket: TLSSocket): Peer {
  let peer = peers.get(socket);
  if (peer === undefined) {
    peer = Object.freeze(readPeer(socket));
    peers.set(socket, peer);
  }
  return peer;
}

type Peer = Readonly<Pick<Caller, "certificate" | "certificateError" | "peerAddress">>;

/**
 * Each connection's peer, read once: what the handshake verified does not change for the
 * connection's life, and a kept-alive HTTP/1.1 client would otherwise have its certificate read
 * (a native call) on every request.
 */
const peers = new WeakMap<TLSSocket, Peer>();

function readPeer(socket: TLSSocket): Peer {
  const peerAddress = socket.remoteAddress;
  if (typeof socket.getPeerX509Certificate !== "function") return { certificate: undefined, certificateError: undefined, peerAddress };
  const x509 = socket.getPeerX509Certificate();
  if (x509 === undefined) return { certificate: undefined, certificateError: undefined, peerAddress };
  if (!socket.authorized) {
    const err = socket.authorizationError;
    return { certificate: undefined, certificateError: err instanceof Error ? err.message : String(err), peerAddress };
  }
  return {
    certificate: { subjectaltname: x509.subjectAltName, serialNumber: x509.serialNumber, valid_to: x509.validTo },
    certificateError: undefined,
    peerAddress,
  };
}

/**
 * The caller without its certificate, for what outlives authentication: a parsed peer
 * certificate is several KiB, and a long-lived stream has no further use for it.
 */
export function withoutCertificate(caller: Caller): Caller {
  return {
    correlationId: caller.correlationId,
    log: caller.log,
    certificate: undefined,
    certificateError: undefined,
    peerAddress: caller.peerAddress,
    host: caller.host,
    ...(caller.abandon !== undefined ? { abandon: caller.abandon } : {}),
  };
}
