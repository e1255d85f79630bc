// The web console's build: plain TypeScript and DOM, bundled into ui/dist, which the control plane
// serves under /ui/ (server/ui/). No inline scripts or styles, so the strict CSP holds.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/ui/",
  logLevel: "warn",
  build: {
    outDir: fileURLToPath(new URL("./dist", import.meta.url)),
    emptyOutDir: true,
    // Inlined assets would become data: URLs the CSP does not allow for scripts and styles.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: "es2022",
  },
});
