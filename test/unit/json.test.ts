import { describe, expect, it } from 'vitest';
import { parseUntrustedJson } from '../../runtime/json.js';

describe('parseUntrustedJson', () => {
  it('parses JSON as JSON.parse does', () => {
    expect(parseUntrustedJson('{"a":[1,"\\u00e9",{"b":null}]}')).toEqual({ a: [1, 'é', { b: null }] });
    expect(() => parseUntrustedJson('{')).toThrow(SyntaxError);
  });

  it('refuses a key named __proto__ at any depth, however it is escaped', () => {
    for (const text of ['{"__proto__":{"x":1}}', '{"a":[{"__proto__":"x"}]}', '{"\\u005f_proto__":1}', '{"__proto\\u005f_":1}']) {
      expect(() => parseUntrustedJson(text), text).toThrow('a key named __proto__ is not accepted');
    }
  });

  it('takes __proto__ as a value, and keys that only look like it', () => {
    expect(parseUntrustedJson('{"a":"__proto__","__proto":1,"proto__":2}')).toEqual({ a: '__proto__', __proto: 1, proto__: 2 });
  });

  it('refuses half of a surrogate pair in a value or a key, and takes a whole pair', () => {
    // Found on a running node: a job named "\ud800" was answered with that name and stored as U+FFFD.
    for (const text of ['{"name":"\\ud800"}', '{"a":["x\\udfffy"]}', '{"\\udc00":1}', '{"a":"\\ud83d\\ud83d"}']) {
      expect(() => parseUntrustedJson(text), text).toThrow('a string holds half of a surrogate pair');
    }
    expect(parseUntrustedJson('{"a":"\\ud83d\\ude00"}')).toEqual({ a: '😀' });
  });
});
