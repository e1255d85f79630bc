// Plain HTTPS calls in the Connect protocol's JSON form, the way curl makes them.
import https from "node:https";

export interface JsonResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export async function postJson(
  url: string,
  caPem: string,
  body: unknown,
  headers: Record<string, string> = {},
  clientCert?: { certPem: string; keyPem: string },
): Promise<JsonResponse> {
  const res = await postText(url, caPem, JSON.stringify(body), { "content-type": "application/json", ...headers }, clientCert);
  return { status: res.status, headers: res.headers, body: res.text === "" ? undefined : JSON.parse(res.text) };
}

/** A POST of `body` as it is (bytes JSON.stringify cannot write, such as 1e400), over HTTP/1.1. */
export function postText(
  url: string,
  caPem: string,
  body: string,
  headers: Record<string, string> = {},
  clientCert?: { certPem: string; keyPem: string },
): Promise<{ status: number; headers: JsonResponse["headers"]; text: string }> {
  return new Promise((resolve, reject) => {
    const tls = clientCert ? { cert: clientCert.certPem, key: clientCert.keyPem } : {};
    const req = https.request(url, { method: "POST", ca: caPem, ...tls, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    req.end(body);
  });
}
