import type { H3 } from 'h3';
import type { Config } from '../../runtime/config.js';
import type { Logger } from '../../runtime/log.js';
import type { ActorSystem } from '../../runtime/system.js';
import type { HttpApi } from '../actor.js';

/** What route modules get; each module adds its routes to the app (h3's composable handlers). */
export interface RouteContext {
  app: H3;
  config: Config;
  system: ActorSystem;
  http: HttpApi;
  log: Logger;
}

export type RouteModule = (ctx: RouteContext) => void;
