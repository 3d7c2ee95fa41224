/**
 * Query strings read with zod schemas: the schemas the OpenAPI document describes the parameters
 * with. Each parameter a route declares is read once: given twice it is refused (`limit: given
 * more than once`), never silently its first or last value. Parameters a route does not declare
 * are ignored, once or more (a schema's z.object strips them), as they always were.
 */
import type { H3Event } from 'h3';
import * as z from 'zod';
import { invalid } from '../runtime/errors.js';
import { describeIssues } from '../runtime/issues.js';

/** Parameters named in one refusal at most (a URL can repeat thousands). */
const NAMED = 5;

/** The parameters `schema` declares; null when it is not an object schema (then every parameter counts). */
function declared(schema: z.ZodType): ReadonlySet<string> | null {
  const shape = (schema as { shape?: unknown }).shape;
  return shape && typeof shape === 'object' ? new Set(Object.keys(shape)) : null;
}

/** The query string as an object of each parameter's value; 400 naming each declared parameter given more than once. */
function queryObject(event: H3Event, names: ReadonlySet<string> | null): Record<string, string> {
  const values = new Map<string, string>();
  const repeated = new Set<string>();
  for (const [k, v] of event.url.searchParams) {
    if (!values.has(k)) values.set(k, v);
    else if (names === null || names.has(k)) repeated.add(k);
  }
  if (repeated.size > 0) throw invalid([...repeated].slice(0, NAMED).map((k) => `${shown(k)}: given more than once`).join('; '));
  return Object.fromEntries(values);
}

/** The query parsed with `schema`; 400 naming every parameter it refuses. */
export function parseQuery<S extends z.ZodType>(schema: S, event: H3Event): z.output<S> {
  const r = schema.safeParse(queryObject(event, declared(schema)));
  if (!r.success) throw invalid(describeIssues(r.error, { limit: NAMED }));
  return r.data;
}

/** Caller-supplied text in an error: bounded, so a refusal never echoes a whole URL. */
export const shown = (input: unknown): string => String(input).slice(0, 40);

/** How a boolean query parameter may be written, the same for every one: true or 1, false or 0. */
export const BOOLEAN_SPELLINGS = ['true', '1', 'false', '0'] as const;

/**
 * An optional boolean query parameter (`?follow=true`), read as true or false from
 * BOOLEAN_SPELLINGS; anything else, an empty value included, is refused naming the parameter
 * (describeIssues puts its name before the message) and the spellings. `description` says what
 * true means.
 */
export function booleanParam(description: string) {
  return z
    .enum(BOOLEAN_SPELLINGS, { error: (iss) => `'${shown(iss.input)}' is not true or false (accepted: ${BOOLEAN_SPELLINGS.join(', ')})` })
    .transform((s) => s === 'true' || s === '1')
    .optional()
    .meta({ description: `${description} (${BOOLEAN_SPELLINGS.join(', ')}; default false)` });
}

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
