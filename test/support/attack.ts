// An attacker in its own process (so its work does not slow the test's own measurements): each of
// N connections sends streamed bodies of the given size to one path, in turn in each protocol,
// until SIGTERM; then it prints how many were answered and how, as one JSON line.
//   node --import tsx test/support/attack.ts <url> <ca file> <path> <bytes> <connections>
import { readFileSync } from "node:fs";
import { call, connect } from "./raw-call.js";

const [url, caFile, path, bytes, connections] = process.argv.slice(2) as [string, string, string, string, string];
const ca = readFileSync(caFile, "utf8");
const contentTypes = ["application/proto", "application/json", "application/grpc", "application/grpc-web+proto"];
const answers: Record<string, number> = {};
let running = true;
process.on("SIGTERM", () => (running = false));

const sessions = await Promise.all(Array.from({ length: Number(connections) }, () => connect(url, ca)));
process.stdout.write("attacking\n");
await Promise.all(
  sessions.map(async (session, i) => {
    for (let n = i; running; n++) {
      const answer = await call(session, path, contentTypes[n % contentTypes.length]!, { bytes: Number(bytes) }).catch((err: Error) => ({
        code: err.message,
      }));
      answers[answer.code] = (answers[answer.code] ?? 0) + 1;
    }
    session.destroy();
  }),
);
process.stdout.write(`${JSON.stringify(answers)}\n`);
