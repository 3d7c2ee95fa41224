import { invalid } from '../../runtime/errors.js';
import { encodeEnvelope } from '../../runtime/wire/envelope.js';
import { onClientGone, readBodyText } from '../body.js';
import { restCaller } from '../caller.js';
import { JsonBody } from '../errors.js';
import { route } from '../handler.js';
import type { RouteModule } from './types.js';

function parseLimit(raw: string | null): number | undefined {
  if (raw === null) return undefined;
  if (!/^[1-9][0-9]{0,8}$/.test(raw)) throw invalid(`limit must be a positive integer, got '${raw}'`);
  return Number(raw);
}

/** The actor message interface: handle, send, invoke, broadcast. */
export const actorRoutes: RouteModule = ({ app, config, http, log }) => {
  const limit = config.rest.body_limit;

  app.get('/api/v1/actor/handle', route(log, () => http.rootHandle()));

  app.post(
    '/api/v1/actor/send',
    route(log, async (event) => {
      await http.send(await readBodyText(event, limit), restCaller(event));
      return { message: 'message sent' };
    }),
  );

  app.post(
    '/api/v1/actor/invoke',
    route(log, async (event) => {
      const reply = await http.invoke(await readBodyText(event, limit), (f) => onClientGone(event, f), restCaller(event));
      return new JsonBody(encodeEnvelope(reply));
    }),
  );

  app.post(
    '/api/v1/actor/broadcast',
    route(log, async (event) => {
      const max = parseLimit(event.url.searchParams.get('limit'));
      const replies = await http.broadcast(await readBodyText(event, limit), max, (f) => onClientGone(event, f), restCaller(event));
      return new JsonBody(`[${replies.map(encodeEnvelope).join(',')}]`);
    }),
  );
};
