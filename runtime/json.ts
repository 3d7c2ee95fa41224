import { invalid } from './errors.js';

/**
 * JSON.parse for text from outside (REST bodies, envelope payloads) that refuses any key named
 * `__proto__`. JSON.parse makes such a key an own property, and zod then drops it without a
 * word (writing it would replace the result's prototype): a job's `placement.labels`
 * `{"__proto__": "x"}` would pass as `{}`, its constraint silently gone. Refused instead, as
 * the name of no field.
 */
export function parseUntrustedJson(text: string): unknown {
  // No key decodes to __proto__ without one of these in the text: the common case parses plainly.
  if (!text.includes('__proto__') && !text.includes('\\u')) return JSON.parse(text);
  return JSON.parse(text, (key, value: unknown) => {
    if (key === '__proto__') throw invalid('a key named __proto__ is not accepted: it names no field');
    return value;
  });
}
