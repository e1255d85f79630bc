// The plain-HTTP listener a Prometheus server scrapes: GET /metrics and nothing else. Plain HTTP on
// its own address, apart from the TLS port, because it carries no secret and no per-node value
// (see docs/metrics.md), and scrapers rarely hold client certificates.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";
import type { ListenAddress } from "./listen-address.js";

export interface MetricsEndpoint {
  /** e.g. http://127.0.0.1:9464/metrics */
  url: string;
  close(): Promise<void>;
}

export async function serveMetrics(registry: Registry, address: ListenAddress): Promise<MetricsEndpoint> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics") return void res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    if (req.method !== "GET" && req.method !== "HEAD") {
      return void res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain" }).end("method not allowed\n");
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(req.method === "HEAD" ? undefined : text),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("metrics unavailable\n"),
    );
  });
  // A scraper needs seconds, not minutes: slow or idle clients do not hold sockets.
  server.requestTimeout = 10_000;
  server.headersTimeout = 5_000;
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(address.port, address.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = address.host.includes(":") ? `[${address.host}]` : address.host;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
