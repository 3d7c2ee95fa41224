import { invalid } from './errors.js';

/**
 * JSON.parse for text from outside (REST bodies, envelope payloads) that refuses any key named
 * `__proto__`. JSON.parse makes such a key an own property, and zod then drops it without a
 * word (writing it would replace the result's prototype): a job's `placement.labels`
 * `{"__proto__": "x"}` would pass as `{}`, its constraint silently gone. Refused instead, as
 * the name of no field.
 */
export function parseUntrustedJson(text: string): unknown {
  // No key decodes to __proto__, and no string to a lone surrogate, without one of these in the
  // text: the common case parses plainly.
  if (!text.includes('__proto__') && !text.includes('\\u')) return JSON.parse(text);
  return JSON.parse(text, (key, value: unknown) => {
    if (key === '__proto__') throw invalid('a key named __proto__ is not accepted: it names no field');
    if (LONE_SURROGATE.test(key) || (typeof value === 'string' && LONE_SURROGATE.test(value))) throw invalid(LONE_SURROGATE_ERROR);
    return value;
  });
}

/**
 * Half of a UTF-16 surrogate pair, alone: JSON's `\ud800` escape makes one, but no UTF-8 holds
 * it, so what was stored was U+FFFD: a job answered with the name it was given kept another.
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATE_ERROR = 'a string holds half of a surrogate pair (an escape from \\ud800 to \\udfff alone): not text';
