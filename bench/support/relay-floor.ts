// Bench-only: the relay's transport with none of ModelForge's own work, the floor bench/openai.ts
// reads the control plane's and the agent's CPU per request and per chunk against. Two processes:
//   relay-floor.ts edge DIR   the control plane's port as server/start/listener.ts sets it up (one
//                             TLS port, HTTP/2 with HTTP/1.1 allowed, server/tuning.ts, a server
//                             certificate of our CA, kept under DIR): clients' HTTP/1.1 requests
//                             are read whole and sent on the one HTTP/2 stream the node holds open;
//                             the answers coming back on it are written to the clients.
//   relay-floor.ts node URL CA-PEM-FILE RUNTIME-ORIGIN
//                             dials the edge over TLS and HTTP/2 (as the agent dials, without a
//                             client certificate), and makes each request it is sent to the
//                             runtime with undici's dispatcher (as agent/engines/runtime-http.ts),
//                             sending the head, each body piece and the end back.
// No authentication, JSON, routing, metering or Protobuf: messages are [u32 id][u8 kind] and a
// payload, in gRPC's length prefix as the Session frames its own (common/grpc-frames.ts). The edge
// prints its URL on stdout once it listens.
import http2 from "node:http2";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { Pool } from "undici";
import { FrameReader, frame } from "../../common/grpc-frames.js";
import { loadOrCreateCa } from "../../server/identity/pki/ca.js";
import { http2ServerTuning } from "../../server/tuning.js";

enum Kind {
  Request = 0,
  Head = 1,
  Data = 2,
  End = 3,
}

/** Whole messages of the relay's stream: far above any answer the stub sends. */
const maxMessageBytes = 16 * 2 ** 20;

/** A message of the relay's stream: [u32 id][u8 kind] and the payload, in gRPC's length prefix. */
function message(id: number, kind: Kind, payload: Buffer | string = ""): Buffer {
  const body = typeof payload === "string" ? Buffer.from(payload) : payload;
  const out = Buffer.allocUnsafe(5 + body.length);
  out.writeUInt32BE(id, 0);
  out.writeUInt8(kind, 4);
  body.copy(out, 5);
  return frame(out);
}

/** Reads the stream's messages, whatever the pieces they arrive in. */
function onMessages(stream: NodeJS.ReadableStream, each: (id: number, kind: Kind, payload: Buffer) => void): void {
  const reader = new FrameReader("/relay", maxMessageBytes);
  stream.on("data", (piece: Buffer) => {
    for (const m of reader.push(piece)) each(m.readUInt32BE(0), m.readUInt8(4) as Kind, m.subarray(5));
  });
}

async function edge(dir: string): Promise<void> {
  const ca = await loadOrCreateCa(dir);
  const tls = await ca.ensureServerCertificate(dir, ["127.0.0.1", "localhost"]);
  let upstream: http2.ServerHttp2Stream | undefined;
  let next = 0;
  const answering = new Map<number, http2.Http2ServerResponse>();
  const server = http2.createSecureServer(
    { ...http2ServerTuning, key: tls.keyPem, cert: tls.certPem, allowHTTP1: true },
    (req, res: http2.Http2ServerResponse) => {
      const parts: Buffer[] = [];
      req.on("data", (p: Buffer) => parts.push(p));
      req.on("end", () => {
        if (upstream === undefined) {
          res.writeHead(503).end();
          return;
        }
        const id = ++next;
        answering.set(id, res);
        upstream.write(message(id, Kind.Request, Buffer.concat(parts)));
      });
    },
  );
  const compat = server.listeners("stream") as ((...args: unknown[]) => void)[];
  server.removeAllListeners("stream");
  server.on("stream", (stream, headers, ...rest) => {
    if (headers[":path"] !== "/relay") return compat[0]!.call(server, stream, headers, ...rest);
    upstream = stream;
    stream.respond({ ":status": 200 });
    onMessages(stream, (id, kind, payload) => {
      const res = answering.get(id);
      if (res === undefined) return;
      if (kind === Kind.Head) res.writeHead(payload.readUInt16BE(0), { "content-type": payload.toString("latin1", 2) });
      else if (kind === Kind.Data) res.write(payload);
      else {
        answering.delete(id);
        res.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  writeFileSync(join(dir, "floor-ca.pem"), ca.certPem);
  process.stdout.write(`https://127.0.0.1:${(server.address() as AddressInfo).port} ${join(dir, "floor-ca.pem")}\n`);
}

async function node(url: string, caFile: string, runtime: string): Promise<void> {
  const session = http2.connect(url, { ca: readFileSync(caFile) });
  const stream = session.request({ ":method": "POST", ":path": "/relay" }, { endStream: false });
  const pool = new Pool(runtime, { connections: 64 });
  // Answers queued in one turn of the loop go out in one write, as the agent's Session sends them.
  let queued: Buffer[] = [];
  const send = (b: Buffer) => {
    if (queued.push(b) > 1) return;
    setImmediate(() => {
      const out = queued;
      queued = [];
      stream.write(out.length === 1 ? out[0]! : Buffer.concat(out));
    });
  };
  onMessages(stream, (id, kind, body) => {
    if (kind !== Kind.Request) return;
    let contentType = "application/json";
    pool.dispatch(
      { path: "/v1/completions", method: "POST", headers: { "content-type": "application/json" }, body },
      {
        onConnect() {},
        onHeaders(status, raw) {
          for (let i = 0; i < raw.length; i += 2) {
            if (String(raw[i]).toLowerCase() === "content-type") contentType = String(raw[i + 1]);
          }
          const head = Buffer.alloc(2 + contentType.length);
          head.writeUInt16BE(status, 0);
          head.write(contentType, 2, "latin1");
          send(message(id, Kind.Head, head));
          return true;
        },
        onData(chunk) {
          send(message(id, Kind.Data, chunk));
          return true;
        },
        onComplete() {
          send(message(id, Kind.End));
        },
        onError() {
          send(message(id, Kind.End));
        },
      },
    );
  });
}

const [role, ...args] = process.argv.slice(2);
if (role === "edge") await edge(args[0]!);
else if (role === "node") await node(args[0]!, args[1]!, args[2]!);
else throw new Error("relay-floor.ts edge DIR | node URL CA-PEM-FILE RUNTIME-ORIGIN");
