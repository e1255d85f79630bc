// Every statement of both backends passes the Prisma driver adapter: failed statements are heard
// there for the query error metrics, and on the embedded database each statement first gives the
// event loop a turn (./pglite.ts says why).
/** Adapter methods that run SQL (or end a transaction) and so can fail a query. */
const queries = new Set(["queryRaw", "executeRaw", "executeScript", "commit", "rollback"]);
/** Methods that hand out another adapter object whose queries are watched too. */
const openers = new Set(["connect", "connectToShadowDb", "startTransaction"]);

export interface QueryWatch {
  /** Hears of every statement that throws; the error is rethrown unchanged. */
  failed?: ((err: unknown) => void) | undefined;
  /** Awaited before each statement runs. */
  before?: (() => Promise<void>) | undefined;
}

/**
 * Wraps a Prisma driver adapter factory (PrismaPg, PrismaPGlite) with `watch`; with nothing to
 * do the factory is returned as it is.
 */
export function watchQueries<T extends object>(factory: T, watch: QueryWatch): T {
  return watch.failed === undefined && watch.before === undefined
    ? factory
    : wrap(factory, watch.failed ?? (() => undefined), watch.before);
}

function wrap<T extends object>(target: T, failed: (err: unknown) => void, before: (() => Promise<void>) | undefined): T {
  return new Proxy(target, {
    get(t, prop) {
      const value = Reflect.get(t, prop, t) as unknown;
      if (typeof value !== "function" || typeof prop !== "string") return value;
      const fn = value as (...args: unknown[]) => Promise<unknown>;
      if (openers.has(prop)) {
        return async (...args: unknown[]) => {
          try {
            return wrap((await fn.apply(t, args)) as object, failed, before);
          } catch (err) {
            failed(err);
            throw err;
          }
        };
      }
      if (queries.has(prop)) {
        return async (...args: unknown[]) => {
          if (before !== undefined) await before();
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
