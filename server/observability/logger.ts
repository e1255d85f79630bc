// JSON logs through pino. Log lines carry facts (method, code, ids), never a request or response
// body, credential or token; the redaction list is a second line of defence, not the first.
import { pino, type Logger, type DestinationStream } from "pino";

export type { Logger };

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: "modelforge-server" },
      redact: {
        paths: ["token", "*.token", "csrPem", "*.csrPem", "keyPem", "*.keyPem", "authorization", "*.authorization"],
        censor: "[redacted]",
      },
    },
    destination,
  );
}
