// Prisma CLI configuration. Only `prisma generate` is used here (it needs no engine); migrations are
// committed SQL applied by the server itself (server/db/migrate.ts).
import { defineConfig } from "prisma/config";

export default defineConfig({
  schema: "prisma/schema.prisma",
  migrations: { path: "prisma/migrations" },
});
