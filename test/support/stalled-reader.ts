// A client that opens a streamed invoke and then never reads its answer, or reads one byte a
// second: written by hand in each framing the port speaks (gRPC, Connect and gRPC-Web on HTTP/2,
// Connect, gRPC-Web and the OpenAI API on HTTP/1.1 too).
import { once } from "node:events";
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { InvokeApi, InvokeStreamRequestSchema } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";

export type Framing = "grpc" | "connect" | "grpc-web" | "openai";
export type Transport = "h2" | "h1";
export type Reading = "never" | "a byte a second";

export interface StalledReader {
  /** Closes it from the client side (cleanup). */
  close(): void;
}

const invokePath = "/modelforge.deployment.v1.DeploymentService/InvokeStream";

function envelope(message: Uint8Array): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.byteLength, 1);
  return Buffer.concat([prefix, message]);
}

/** The request in a framing: its path, headers and body. */
function requestOf(framing: Framing, deployment: string, completion: object, key: string) {
  const authorization = `Bearer ${key}`;
  if (framing === "openai") {
    const body = Buffer.from(JSON.stringify({ model: deployment, stream: true, ...completion }));
    return { path: "/v1/completions", headers: { "content-type": "application/json", authorization }, body };
  }
  const req = create(InvokeStreamRequestSchema, {
    deploymentId: deployment,
    contentType: "application/json",
    payload: Buffer.from(JSON.stringify(completion)),
    api: InvokeApi.COMPLETIONS,
  });
  if (framing === "connect") {
    const body = envelope(Buffer.from(toJsonString(InvokeStreamRequestSchema, req)));
    return {
      path: invokePath,
      headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", authorization },
      body,
    };
  }
  const body = envelope(toBinary(InvokeStreamRequestSchema, req));
  if (framing === "grpc")
    return { path: invokePath, headers: { "content-type": "application/grpc+proto", te: "trailers", authorization }, body };
  return { path: invokePath, headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", authorization }, body };
}

export interface StallOptions {
  url: string;
  ca: string;
  framing: Framing;
  transport: Transport;
  reading: Reading;
  deployment: string;
  key: string;
  completion: object;
}

/**
 * Opens the call through a relay that passes on the client's bytes but, once the connection is
 * up and before the request is sent, passes on none of the server's (or one a second). Reading
 * stops where the server sees it stop: in TCP, whose window closes; a node:http2 client whose
 * stream is paused still takes its data and acknowledges it.
 */
export async function stalledReader(o: StallOptions): Promise<StalledReader> {
  const request = requestOf(o.framing, o.deployment, o.completion, o.key);
  const relay = await StallingRelay.open(new URL(o.url));
  const client =
    o.transport === "h2"
      ? await overHttp2(relay.port, o.ca, request, () => relay.stall(o.reading))
      : await overHttp1(relay.port, o.ca, request, () => relay.stall(o.reading));
  return {
    close() {
      client.destroy();
      relay.close();
    },
  };
}

async function overHttp2(port: number, ca: string, request: ReturnType<typeof requestOf>, stall: () => void) {
  const session = http2.connect(`https://localhost:${port}`, { ca });
  session.on("error", () => undefined);
  await once(session, "connect");
  stall();
  const stream = session.request({ ":method": "POST", ":path": request.path, ...request.headers });
  stream.on("error", () => undefined);
  stream.end(request.body);
  return session;
}

async function overHttp1(port: number, ca: string, request: ReturnType<typeof requestOf>, stall: () => void) {
  const socket = tls.connect({ host: "127.0.0.1", port, ca, ALPNProtocols: ["http/1.1"], servername: "localhost" });
  socket.on("error", () => undefined);
  await once(socket, "secureConnect");
  stall();
  const head = [
    `POST ${request.path} HTTP/1.1`,
    `host: localhost:${port}`,
    ...Object.entries(request.headers).map(([k, v]) => `${k}: ${v}`),
    `content-length: ${request.body.byteLength}`,
    "",
    "",
  ].join("\r\n");
  socket.write(Buffer.concat([Buffer.from(head), request.body]));
  return socket;
}

/** A loopback TCP relay for one connection, whose server-to-client direction can be stopped. */
class StallingRelay {
  private upstream: net.Socket | undefined;
  private downstream: net.Socket | undefined;
  private ticker: NodeJS.Timeout | undefined;

  private constructor(
    private readonly listener: net.Server,
    readonly port: number,
  ) {}

  static async open(target: URL): Promise<StallingRelay> {
    const listener = net.createServer();
    listener.listen(0, "127.0.0.1");
    await once(listener, "listening");
    const relay = new StallingRelay(listener, (listener.address() as net.AddressInfo).port);
    listener.once("connection", (down: net.Socket) => {
      const up = net.connect(Number(target.port), target.hostname);
      relay.upstream = up;
      relay.downstream = down;
      for (const s of [up, down]) s.on("error", () => undefined);
      down.pipe(up);
      up.pipe(down);
    });
    return relay;
  }

  /** From now on the server's bytes go no further: none at all, or one a second. */
  stall(reading: Reading): void {
    const up = this.upstream!;
    up.unpipe(this.downstream!);
    up.pause();
    if (reading === "a byte a second") {
      this.ticker = setInterval(() => {
        const byte = up.read(1) as Buffer | null;
        if (byte !== null) this.downstream!.write(byte);
      }, 1_000);
    }
  }

  close(): void {
    clearInterval(this.ticker);
    this.upstream?.destroy();
    this.downstream?.destroy();
    this.listener.close();
  }
}
