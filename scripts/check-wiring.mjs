// app.ts and server/start/ assemble the control plane; no module of it may import the assembly
// back (only the entry point main.ts starts it, and only app.ts orders the start/ constructors).
// madge finds circles; this finds the one-way rule's other half.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const offenders = [];
const startDir = join("server", "start");
const walk = (dir) => {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path);
    else if (path.endsWith(".ts") && path !== join("server", "main.ts") && path !== join("server", "app.ts")) {
      const text = readFileSync(path, "utf8");
      if (/from\s+["'][./]*(\.\.\/)*app\.js["']/.test(text)) offenders.push(`${path} (app.ts)`);
      if (!path.startsWith(startDir) && /from\s+["'][./]*\/start\/[^"']+["']/.test(text)) offenders.push(`${path} (server/start/)`);
    }
  }
};
walk("server");
if (offenders.length > 0) {
  console.error(`these server modules import the assembly, which only main.ts (app.ts) and app.ts (start/) may: ${offenders.join(", ")}`);
  process.exit(1);
}
console.log("wiring: no server module imports app.ts or server/start/");
