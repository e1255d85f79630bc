// app.ts assembles the control plane; no module of it may import the assembly back (only the entry
// point main.ts starts it). madge finds circles; this finds the one-way rule's other half.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const offenders = [];
const walk = (dir) => {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path);
    else if (path.endsWith(".ts") && path !== join("server", "main.ts") && path !== join("server", "app.ts")) {
      if (/from\s+["'][./]*(\.\.\/)*app\.js["']/.test(readFileSync(path, "utf8"))) offenders.push(path);
    }
  }
};
walk("server");
if (offenders.length > 0) {
  console.error(`these server modules import server/app.ts, which only main.ts may: ${offenders.join(", ")}`);
  process.exit(1);
}
console.log("wiring: no server module imports app.ts");
