import type { Volumes } from '../runtime/volumes.js';
import { H3, handleCors, type H3Event } from 'h3';
import type { Config } from '../runtime/config.js';
import type { Logger } from '../runtime/log.js';
import type { StageTimings } from '../runtime/stage-timings.js';
import type { ActorSystem } from '../runtime/system.js';
import type { HttpApi } from './actor.js';
import type { ApiKeyStore } from './apikeys.js';
import { restAuth, restAuthEnabled } from './auth.js';
import { errorId, errorJson, internalErrorBody, JsonBody, toWebResponse } from './errors.js';
import { crossOriginCredentials, originMatcher, requestGuards } from './guard.js';
import { actorLimits } from './limits.js';
import { addOpenApiRoute } from './openapi.js';
import { RouteTable } from './route-table.js';
import { actorRoutes } from './routes/actor.js';
import { devRoutes } from './routes/dev.js';
import { systemRoutes } from './routes/system.js';
import type { RouteModule } from './routes/types.js';

export interface AppOptions {
  config: Config;
  system: ActorSystem;
  /** The HTTP actor's api: what REST requests become envelopes through. */
  http: HttpApi;
  log: Logger;
  /** Route modules added by other components (jobs, resources, plugins). */
  routes?: RouteModule[];
  /** The home's API keys; required when `auth.api_key_enabled` is on. */
  apiKeys?: ApiKeyStore;
  /** This node's software version, as the OpenAPI document states it. */
  version?: string;
  /** This node's stage timings, served at /api/v1/dev/stages; none when it keeps none. */
  stages?: StageTimings;
  /** This node's volumes, which job specs may name (README "Job outputs"). */
  volumes?: Volumes;
}

/**
 * The router found no route: 405 when the path has routes under other methods (RFC 9110
 * §15.5.6, with `Allow`), so a client told 404 does not conclude the path is wrong. OPTIONS
 * keeps its 404: CORS preflights are answered before the routes, and any other OPTIONS is
 * answered as it always was.
 */
function noRoute(event: H3Event, table: RouteTable | undefined): JsonBody {
  const { method } = event.req;
  const path = event.url.pathname;
  const allowed = method === 'OPTIONS' || !table ? [] : table.methodsAt(path);
  if (allowed.length === 0) return new JsonBody(errorJson(`no route ${method} ${path}`), 404);
  const allow = allowed.join(', ');
  return new JsonBody(errorJson(`method ${method} is not allowed on ${path}: it allows ${allow}`), 405, { allow });
}

/** The node's REST app. */
export function createApp(opts: AppOptions): H3 {
  return buildApp(opts).app;
}

/** The app and the table of its routes (what the OpenAPI document is written from). */
export function buildApp(opts: AppOptions): { app: H3; table: RouteTable } {
  const { config, log } = opts;
  const cors = config.rest.cors;
  // Set once the routes are added; requests are served only after.
  let table: RouteTable | undefined;
  const app = new H3({
    // Whatever h3 itself rejects (unknown route, malformed URL) still answers `{"error": …}`.
    onError: (error, event: H3Event) => {
      const status = error.status ?? 500;
      if (status >= 500) {
        const id = errorId();
        log.error({ err: error.cause ?? error, error_id: id, path: event.url.pathname }, 'unhandled request error');
        return toWebResponse(internalErrorBody(id));
      }
      if (status === 404) return toWebResponse(noRoute(event, table));
      return toWebResponse(new JsonBody(errorJson(error.message), status));
    },
  });

  // Before anything else: a request a web page forged is refused before it has any effect.
  const guards = requestGuards({ addr: config.rest.addr, allowedHosts: config.rest.allowed_hosts, origins: cors.origins, tls: config.tls.enabled });
  for (const guard of guards) app.use(guard);
  // originGuard's own matcher, so CORS headers are granted to exactly the origins it lets in.
  const allowedOrigin = originMatcher(cors.origins);
  app.use((event) => {
    const preflight = handleCors(event, {
      origin: allowedOrigin,
      methods: cors.methods as never,
      allowHeaders: cors.headers,
      credentials: cors.credentials,
      maxAge: String(cors.max_age),
      preflight: { statusCode: 204 },
    });
    if (preflight !== false) return preflight;
  });
  // Credentials first (401/403), then per-client limits, which count by the principal found.
  if (config.auth.api_key_enabled && !opts.apiKeys) throw new Error('auth.api_key_enabled needs the home API key store');
  const { auth } = config;
  const authOptions = {
    apiKeys: auth.api_key_enabled ? opts.apiKeys : undefined,
    jwtSecret: auth.jwt_secret || undefined,
    jwt: { maxLifetimeS: auth.jwt_max_lifetime_s, issuer: auth.jwt_issuer, audience: auth.jwt_audience },
  };
  app.use(crossOriginCredentials(restAuthEnabled(authOptions)));
  app.use(restAuth(authOptions));
  const rl = config.rest.rate_limit;
  app.use(actorLimits({ perSecond: rl.per_second, burst: rl.burst, loopback: rl.loopback, maxPendingPerClient: config.rest.max_pending_per_client }));

  // Every route goes through the table, which keeps its documentation: the OpenAPI document lists them all.
  table = new RouteTable(app, log, config.rest.body_limit);
  const ctx = { table, config, system: opts.system, http: opts.http, log, stages: opts.stages, volumes: opts.volumes };
  for (const mod of [systemRoutes, actorRoutes, devRoutes, ...(opts.routes ?? [])]) mod(ctx);
  addOpenApiRoute(table, { version: opts.version ?? 'unknown', auth: { apiKey: auth.api_key_enabled, jwt: Boolean(auth.jwt_secret) } });
  return { app, table };
}
