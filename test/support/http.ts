// Plain HTTPS calls in the Connect protocol's JSON form, the way curl makes them.
import https from "node:https";

export interface JsonResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export function postJson(
  url: string,
  caPem: string,
  body: unknown,
  headers: Record<string, string> = {},
  clientCert?: { certPem: string; keyPem: string },
): Promise<JsonResponse> {
  return new Promise((resolve, reject) => {
    const tls = clientCert ? { cert: clientCert.certPem, key: clientCert.keyPem } : {};
    const req = https.request(
      url,
      { method: "POST", ca: caPem, ...tls, headers: { "content-type": "application/json", ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text === "" ? undefined : JSON.parse(text) });
        });
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}
