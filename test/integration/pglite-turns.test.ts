// The embedded database gives the event loop a turn before each statement (server/db/pglite.ts):
// PGlite runs statements in this thread, so without it a request that arrives while a sequence of
// statements runs (a periodic sweep's reads) waits for the whole sequence. Here the request is a
// byte on a loopback socket, sent once the sequence has begun; it must be read between statements.
import { once } from "node:events";
import { createServer, connect, type AddressInfo, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../server/db/client.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

let tdb: TestDatabase;
let db: Database;
let server: Server;
/** Statements finished when the last byte arrived. */
let finishedAtArrival: number | undefined;
let finished = 0;

beforeAll(async () => {
  tdb = await createTestDatabase("pglite");
  db = await openDatabase({ dataDir: tdb.dataDir });
  server = createServer((socket) => socket.on("data", () => (finishedAtArrival = finished)));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
}, 60_000);
afterAll(async () => {
  server?.close();
  await db?.close();
  await tdb?.cleanup();
});

const statements = 200;

/** Runs `statement` `statements` times in a row; a byte is sent as the first one starts. */
async function arrivalDuring(statement: () => Promise<unknown>): Promise<number | undefined> {
  const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
  await once(socket, "connect");
  finishedAtArrival = undefined;
  finished = 0;
  try {
    socket.write("x");
    for (let i = 0; i < statements; i++) {
      await statement();
      finished++;
    }
    // Whenever it was read, it has been by now.
    await new Promise((resolve) => setTimeout(resolve, 50));
    return finishedAtArrival;
  } finally {
    socket.destroy();
  }
}

describe("statements on the embedded database take turns with the event loop", () => {
  it.each([
    ["Prisma reads", () => db.prisma.node.findMany({ take: 1 })],
    ["raw Prisma statements", () => db.prisma.$queryRaw`SELECT 1`],
    ["direct statements", () => db.direct({ name: "mf_test_turns", text: "SELECT 1 AS one" }, [])],
  ])("a request arriving during a run of %s is read before the run ends", async (_name, statement) => {
    const at = await arrivalDuring(statement);
    expect(at).toBeDefined();
    expect(at!).toBeLessThan(statements);
  });

  it("so does one arriving during a transaction's statements", async () => {
    const at = await arrivalDuring(() =>
      db.prisma.$transaction(async (tx) => {
        await tx.$queryRaw`SELECT 1`;
        await tx.$queryRaw`SELECT 2`;
      }),
    );
    expect(at!).toBeLessThan(statements);
  });
});
