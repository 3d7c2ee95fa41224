import type { H3Event } from 'h3';
import type { Logger } from '../runtime/log.js';
import { errorResponse, jsonResponse } from './errors.js';

/**
 * Wraps a route so every outcome is a JSON response: values are serialized, strings are
 * taken as ready JSON, and errors become `{"error": …}` with their status.
 */
export function route(log: Logger, fn: (event: H3Event) => unknown | Promise<unknown>) {
  return async (event: H3Event): Promise<Response> => {
    try {
      const out = await fn(event);
      if (out instanceof Response) return out;
      return jsonResponse(JSON.stringify(out));
    } catch (e) {
      return errorResponse(e, (err) => log.error({ err, path: event.url.pathname }, 'request failed'));
    }
  };
}
