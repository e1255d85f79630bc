// A TCP balancer on loopback, as a deployment puts one in front of its control-plane replicas for
// the agents: each connection goes to the first replica (in the order given) that accepts it, and
// TLS passes through untouched (the replicas share one server certificate).
import net from "node:net";
import type { AddressInfo } from "node:net";

export interface TcpBalancer {
  /** e.g. https://127.0.0.1:40123 */
  url: string;
  close(): Promise<void>;
}

export async function tcpBalancer(ports: readonly number[]): Promise<TcpBalancer> {
  const open = new Set<net.Socket>();
  const keep = (s: net.Socket) => {
    open.add(s);
    s.once("close", () => open.delete(s));
    s.on("error", () => s.destroy());
  };
  const server = net.createServer((client) => {
    keep(client);
    client.pause();
    const tryAt = (i: number) => {
      if (i >= ports.length || client.destroyed) return void client.destroy();
      const upstream = net.connect(ports[i]!, "127.0.0.1");
      const refused = () => tryAt(i + 1);
      upstream.once("error", refused);
      upstream.once("connect", () => {
        upstream.off("error", refused);
        keep(upstream);
        upstream.once("close", () => client.destroy());
        client.once("close", () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    };
    tryAt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
