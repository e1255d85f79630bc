// HTTP/2, TLS and socket options for one port holding thousands of long-lived agent connections.
// server/start/listener.ts spreads them into http2.createSecureServer. bench/heartbeats.ts measures their
// effect (BENCH_TUNING=off runs the untuned baseline).
//
// What a connection costs (bench/heartbeats.ts prints the RSS per agent): a small share is
// JavaScript heap (the TLS socket and HTTP/2 session objects, the Session stream and its
// AgentSession), more is nghttp2 (its outbound frame buffer and HPACK tables; the table options
// below take a little off it), and the rest OpenSSL and socket state. Node already sets
// SSL_MODE_RELEASE_BUFFERS on every TLS connection, so idle connections hold no record buffers. A
// bare node:http2 stream with these same TLS settings (BENCH_FLOOR=raw) costs about as much, with
// or without the options below: they bound what a connection may hold and how fast dead ones go;
// they do not shrink the steady cost.
import { ticketEpochMs } from "./identity/pki/session-tickets.js";
import type { SecureServerOptions } from "node:http2";

export const http2ServerTuning: SecureServerOptions = {
  settings: {
    // An agent holds one Session stream plus the odd unary call; nghttp2's default is unbounded,
    // so one misbehaving peer could hold thousands of streams. gRPC servers commonly use 100.
    maxConcurrentStreams: 100,
    // gRPC metadata here is a few hundred bytes; the default 64 KiB lets each request buffer far
    // more header state than any client of ours sends.
    maxHeaderListSize: 16 * 1024,
    // HPACK dynamic table we keep for decoding each peer's headers (default 4 KiB). A Session
    // sends its headers once per connection, so the table buys agents nothing; 1 KiB still
    // lets unary clients (CLI, services) index their repeated headers.
    headerTableSize: 1024,
  },
  // The table we keep for encoding our response headers, likewise (default 4 KiB).
  maxDeflateDynamicTableSize: 1024,
  // Replies are small writes answered in a round trip: no Nagle delay (gRPC sets TCP_NODELAY on
  // every socket too).
  noDelay: true,
  // A node that loses power leaves a half-open connection the server would otherwise keep (with
  // its memory) forever, since the server sends nothing unless spoken to; TCP keepalive probes
  // find it after a minute of silence. Agents heartbeat far more often than that.
  keepAlive: true,
  keepAliveInitialDelay: 60_000,
  // A TLS handshake that has not finished in 10 s is not going to (default 120 s): during a
  // reconnect storm stuck handshakes would otherwise hold sockets for two minutes.
  handshakeTimeout: 10_000,
  // Sessions resume (TLS 1.3 tickets; see identity/pki/session-tickets.ts for the keys, which
  // server/start/listener.ts sets): a client certificate is asked for, so OpenSSL resumes only sessions of the
  // same context, and Node's default context differs per process; a fixed one lets a ticket from
  // one replica, or from before a restart, resume on another.
  sessionIdContext: "modelforge",
  sessionTimeout: ticketEpochMs / 1000,
};

/**
 * The listen backlog: connections the kernel completes and holds while the control plane is busy
 * (starting, or in a reconnect storm) before it accepts them. Node's default is 511; past it
 * Linux drops a new SYN, and the agent's TCP stack retries it only after 1, 3, 7, 15 s (with
 * 511, restarts of bench/heartbeats.ts's fleet overflowed the queue and came back later; it
 * prints the ListenOverflows of each restart). The kernel caps the value at net.core.somaxconn
 * (4096 by default since Linux 5.4), as Go's net package does by reading it.
 */
export const listenBacklog = 65_535;

/**
 * Session opens that may run at once, and how many more may wait (see ./sessions/admission.ts).
 * Their reads are shared: the opens waiting together are one statement (./sessions/open.ts), so
 * the limit bounds what an open does beside it: the write when Hello changed, the jobs
 * reconciliation when the node has jobs. 64 of those at a few milliseconds each queue on the
 * pool's ten connections for tens of milliseconds at most before the heartbeat flush and the
 * reconcilers get theirs. With eight, a storm finished at most eight opens per event-loop
 * iteration, and a loop busy with handshakes runs few iterations a second. A waiter is answered
 * within the agent's 30 s Welcome deadline up to about 2,000 deep.
 */
export const sessionOpenTuning = { concurrent: 64, queued: 2_000 };

/**
 * Node flags the control plane runs with (`npm start`, deploy/modelforge-server.service, the fleet
 * benchmark's servers). A young generation of up to 32 MiB per semi-space (V8's default is 16 on
 * 64-bit): per-message garbage of thousands of sessions then dies young instead of being promoted
 * and swept by full collections that stall the event loop. In bench/heartbeats.ts (SERVER_FLAGS
 * compares settings) it gave better medians of the ack tail and of the longest server stall,
 * inside a wide spread, at a cost in RSS per agent: kept, to be re-measured.
 */
export const serverNodeFlags = ["--max-semi-space-size=32"];

/**
 * The C allocator the installed control plane runs with: deploy/install.mjs preloads jemalloc
 * (Debian's libjemalloc2) in the systemd unit when the library is there, and the fleet benchmark's
 * servers run with it. OpenSSL 3.0 and nghttp2 allocate and free many small blocks per connection:
 * glibc's malloc was a large share of the servers' on-CPU samples during resumed session opens
 * (perf). bench/heartbeats.ts with one replica on each allocator in the same seconds
 * (MALLOC=glibc,jemalloc and the reverse) measures it: the jemalloc replica spent less CPU per
 * resumed session open and per bare resumed TLS handshake in most paired rounds, and held less
 * RSS; full session opens, bound by RSA, showed no difference.
 * `npm start` keeps the system's allocator: a trial needs no extra package.
 */
export const serverAllocator = { name: "jemalloc", library: "libjemalloc.so.2" };
