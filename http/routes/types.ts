import type { Config } from '../../runtime/config.js';
import type { Logger } from '../../runtime/log.js';
import type { StageTimings } from '../../runtime/stage-timings.js';
import type { Volumes } from '../../runtime/volumes.js';
import type { ActorSystem } from '../../runtime/system.js';
import type { HttpApi } from '../actor.js';
import type { RouteTable } from '../route-table.js';

/**
 * What route modules get. Each module adds its routes to `table` with their documentation, so
 * the OpenAPI document lists every one (test/rest/openapi.test.ts checks h3's own list against it).
 */
export interface RouteContext {
  table: RouteTable;
  config: Config;
  system: ActorSystem;
  http: HttpApi;
  log: Logger;
  /** This node's stage timings, when it keeps them (`general.stage_timings`). */
  stages?: StageTimings;
  /** This node's volumes, which a job's inputs may name (http/routes/outputs.ts). */
  volumes?: Volumes;
}

export type RouteModule = (ctx: RouteContext) => void;
