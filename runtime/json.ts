import { invalid } from './errors.js';
import { refuseDuplicateKeys } from './json-keys.js';

/**
 * JSON.parse for text from outside (REST bodies, envelope payloads) that refuses any key named
 * `__proto__`, and any object with a key twice (./json-keys.ts; `where`, such as `the request
 * body`, ends that message). JSON.parse makes a `__proto__` key an own property, and zod then
 * drops it without a word (writing it would replace the result's prototype): a job's
 * `placement.labels` `{"__proto__": "x"}` would pass as `{}`, its constraint silently gone.
 * Refused instead, as the name of no field.
 */
export function parseUntrustedJson(text: string, where?: string): unknown {
  // No key decodes to __proto__, and no string to a lone surrogate, without one of these in the
  // text: the common case parses plainly.
  const value: unknown =
    !text.includes('__proto__') && !text.includes('\\u')
      ? JSON.parse(text)
      : JSON.parse(text, (key, value: unknown) => {
          if (key === '__proto__') throw invalid(PROTO_KEY_ERROR);
          if (LONE_SURROGATE.test(key) || (typeof value === 'string' && LONE_SURROGATE.test(value))) throw invalid(LONE_SURROGATE_ERROR);
          return value;
        });
  refuseDuplicateKeys(text, value, where);
  return value;
}

const PROTO_KEY_ERROR = 'a key named __proto__ is not accepted: it names no field';

/**
 * Refuses a key named __proto__ anywhere in `value`, already parsed (by a parser other than
 * JSON.parse, which parseUntrustedJson checks as it goes), for the reason parseUntrustedJson gives.
 */
export function refuseProtoKeys(value: unknown): void {
  if (typeof value !== 'object' || value === null) return;
  for (const [key, inner] of Object.entries(value)) {
    if (key === '__proto__') throw invalid(PROTO_KEY_ERROR);
    refuseProtoKeys(inner);
  }
}

/**
 * Half of a UTF-16 surrogate pair, alone: JSON's `\ud800` escape makes one, but no UTF-8 holds
 * it, so what was stored was U+FFFD: a job answered with the name it was given kept another.
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATE_ERROR = 'a string holds half of a surrogate pair (an escape from \\ud800 to \\udfff alone): not text';
