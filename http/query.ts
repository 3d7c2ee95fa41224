/** Query strings read with zod schemas: the schemas the OpenAPI document describes the parameters with. */
import type { H3Event } from 'h3';
import * as z from 'zod';
import { invalid } from '../runtime/errors.js';
import { describeIssues } from '../runtime/issues.js';

/** The query string as an object: each parameter's first value, as URLSearchParams.get reads it. */
function queryObject(event: H3Event): Record<string, string> {
  const first = new Map<string, string>();
  for (const [k, v] of event.url.searchParams) if (!first.has(k)) first.set(k, v);
  return Object.fromEntries(first);
}

/** The query parsed with `schema`; 400 naming every parameter it refuses. */
export function parseQuery<S extends z.ZodType>(schema: S, event: H3Event): z.output<S> {
  const r = schema.safeParse(queryObject(event));
  if (!r.success) throw invalid(describeIssues(r.error, { limit: 5 }));
  return r.data;
}

/** Caller-supplied text in an error: bounded, so a refusal never echoes a whole URL. */
export const shown = (input: unknown): string => String(input).slice(0, 40);

/**
 * A whole number written in decimal digits (`pattern`), from `min` to `max`; anything else is
 * refused with `message(raw)`, which names the parameter.
 */
export function wholeNumberParam(o: { pattern: RegExp; min: number; max: number; message: (raw: string) => string; description: string }) {
  const error = (iss: { input?: unknown }) => o.message(shown(iss.input));
  return z
    .string()
    .regex(o.pattern, { error, abort: true })
    .refine((s) => Number(s) >= o.min && Number(s) <= o.max, { error })
    .transform(Number)
    .meta({ description: o.description });
}
