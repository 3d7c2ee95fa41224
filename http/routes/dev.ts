import { createEventStream } from 'h3';
import { filter } from 'rxjs';
import type { SystemEvent } from '../../runtime/system.js';
import { encodeEnvelope, type Envelope } from '../../runtime/wire/envelope.js';
import { errorBody, toWebResponse } from '../errors.js';
import { DmsError } from '../../runtime/errors.js';
import type { RouteModule } from './types.js';

/** Events a slow watcher may lag behind before the stream reports drops instead of buffering. */
const MAX_IN_FLIGHT = 1000;

function describeEnvelope(env: Envelope): unknown {
  return JSON.parse(encodeEnvelope({ ...env, nonce: 0n, opt: { ...env.opt, exp: 0n } }), (k, v) => v) as object;
}

function toJson(e: SystemEvent): string {
  const base: Record<string, unknown> = { type: e.type, at: new Date().toISOString() };
  if ('actor' in e) base.actor = e.actor;
  if ('state' in e) base.state = e.state;
  if ('reason' in e) base.reason = e.reason;
  if ('origin' in e) base.origin = e.origin;
  if ('env' in e) {
    // uint64 fields as strings: watchers are browsers and scripts that parse with JSON.parse.
    base.envelope = { ...(describeEnvelope(e.env) as object), nonce: String(e.env.nonce), exp: String(e.env.opt.exp) };
  }
  return JSON.stringify(base);
}

/**
 * Dev mode: `GET /api/v1/dev/events` streams every envelope routed and delivered, every
 * dead letter and every actor lifecycle change as server-sent events. Filters: `?type=`
 * (deliver, route, dead-letter, lifecycle; comma-separated) and `?actor=`.
 */
export const devRoutes: RouteModule = ({ app, config, system }) => {
  app.get('/api/v1/dev/events', (event) => {
    if (!config.general.debug) return toWebResponse(errorBody(new DmsError('forbidden', 'dev streams are available in debug mode only')));
    const types = event.url.searchParams.get('type')?.split(',').filter(Boolean);
    const actor = event.url.searchParams.get('actor');
    const stream = createEventStream(event);
    let inFlight = 0;
    let dropped = 0;
    const sub = system.events
      .pipe(filter((e) => (!types || types.includes(e.type)) && (!actor || ('actor' in e && e.actor === actor))))
      .subscribe((e) => {
        if (inFlight >= MAX_IN_FLIGHT) {
          dropped++;
          return;
        }
        inFlight++;
        const data = dropped ? JSON.stringify({ type: 'dropped', count: dropped }) : toJson(e);
        dropped = 0;
        stream.push({ event: 'dms', data }).finally(() => inFlight--);
      });
    stream.onClosed(() => sub.unsubscribe());
    stream.pushComment('dms dev events').catch(() => {});
    return stream;
  });
};
