// Plain HTTPS calls in the Connect protocol's JSON form, the way curl makes them; and a bare
// HTTP/2 request to the OpenAI API, for tests of clients that leave or cut their body short.
import http2 from "node:http2";
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

/**
 * A POST to `/v1/completions` over a fresh HTTP/2 session, its body not yet written: the caller
 * writes, reads and leaves as the test needs. Errors of the session and stream are the test's own
 * doing (a reset, a destroy) and are ignored.
 */
export function openAiStream(
  url: string,
  caPem: string,
  key: string,
  headers: Record<string, string> = {},
): { session: http2.ClientHttp2Session; req: http2.ClientHttp2Stream } {
  const session = http2.connect(url, { ca: caPem });
  session.on("error", () => undefined);
  const req = session.request({
    ":method": "POST",
    ":path": "/v1/completions",
    authorization: `Bearer ${key}`,
    "content-type": "application/json",
    ...headers,
  });
  req.on("error", () => undefined);
  return { session, req };
}
