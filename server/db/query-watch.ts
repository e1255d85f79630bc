// Failed statements for the query error metrics, heard through the Prisma driver adapter: the one
// place every query of both backends passes.
/** Adapter methods that run SQL (or end a transaction) and so can fail a query. */
const queries = new Set(["queryRaw", "executeRaw", "executeScript", "commit", "rollback"]);
/** Methods that hand out another adapter object whose queries are watched too. */
const openers = new Set(["connect", "connectToShadowDb", "startTransaction"]);

/**
 * Wraps a Prisma driver adapter factory (PrismaPg, PrismaPGlite) so that `failed` hears of every
 * statement that throws. The error is rethrown unchanged; without a listener the factory is
 * returned as it is.
 */
export function watchQueries<T extends object>(factory: T, failed: ((err: unknown) => void) | undefined): T {
  return failed === undefined ? factory : watch(factory, failed);
}

function watch<T extends object>(target: T, failed: (err: unknown) => void): T {
  return new Proxy(target, {
    get(t, prop) {
      const value = Reflect.get(t, prop, t) as unknown;
      if (typeof value !== "function" || typeof prop !== "string") return value;
      const fn = value as (...args: unknown[]) => Promise<unknown>;
      if (openers.has(prop)) {
        return async (...args: unknown[]) => {
          try {
            return watch((await fn.apply(t, args)) as object, failed);
          } catch (err) {
            failed(err);
            throw err;
          }
        };
      }
      if (queries.has(prop)) {
        return async (...args: unknown[]) => {
          try {
            return await fn.apply(t, args);
          } catch (err) {
            failed(err);
            throw err;
          }
        };
      }
      return fn.bind(t);
    },
  });
}
