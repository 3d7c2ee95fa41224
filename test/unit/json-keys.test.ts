import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readSpec } from '../../cli/commands/jobs.js';
import { parseUntrustedJson } from '../../runtime/json.js';
import { parseEnvelope, parseJsonLossless } from '../../runtime/wire/envelope.js';

/** Both parsers of text from outside: JSON.parse's (REST bodies, payloads) and the lossless one (envelopes, tokens). */
const parsers: [string, (text: string, where?: string) => unknown][] = [
  ['parseUntrustedJson', parseUntrustedJson],
  ['parseJsonLossless', parseJsonLossless],
];

describe.each(parsers)('%s and a key twice', (_name, parse) => {
  it('refuses it at any depth, naming the key and the object it is in, whatever the values', () => {
    const cases: [string, string][] = [
      ['{"a":1,"a":2}', 'duplicate key "a"'],
      ['{"a":1,"a":1}', 'duplicate key "a"'],
      ['{"a":{"x":[1]},"a":{"x":[1]}}', 'duplicate key "a"'],
      ['{"a":"x","\\u0061":"x"}', 'duplicate key "a"'],
      ['{"r":{"cpu":1,"mem":2,"cpu":3}}', 'duplicate key "cpu" at r'],
      ['[0,[{"k":1}],[{"k":1},{"k":1,"j":{"q":0,"q":0}}]]', 'duplicate key "q" at [2][1].j'],
      ['{ "a" : { "b" :\n[ { "c" : 1 ,\t"c" : 2 } ] } }', 'duplicate key "c" at a.b[0]'],
      ['{"s":"\\":{\\"","t":{"\\"":1,"\\"":2}}', 'duplicate key "\\"" at t'],
      ['{"a.b":{"x":1,"x":1}}', 'duplicate key "x" at a.b'],
    ];
    for (const [text, error] of cases) {
      expect(() => parse(text), text).toThrow(error);
      expect(() => parse(text, 'the request body'), text).toThrow(`${error} in the request body`);
    }
  });

  it('takes a key once per object, keys that look alike, and keys that are only text in a string', () => {
    const texts = [
      '{"a":1,"b":{"a":1},"c":[{"a":1},{"a":1}]}',
      '{"a":1,"A":1,"a ":1,"\\u00e9":1,"e\\u0301":1}',
      '{"a":"\\"a\\":1,\\"a\\":2","b":"{\\"x\\":1,\\"x\\":1}"}',
      '{"a":"b:c","d":"e\\\\","f":"\\\\\\"g\\":"}',
      '[1,"a",{"a":null},[],{}]',
      '"a"',
      '{}',
    ];
    for (const text of texts) expect(parse(text), text).toEqual(parseUntrustedJsonOrLossless(parse, text));
  });

  it('reads nesting deeper than a stack of calls would go', () => {
    const depth = 20_000;
    const deep = '['.repeat(depth) + '{"a":1}' + ']'.repeat(depth);
    if (parse === parseJsonLossless) return; // lossless-json itself recurses: it refuses such text as malformed.
    expect(() => parse(deep)).not.toThrow();
    expect(() => parse('['.repeat(depth) + '{"a":1,"a":1}' + ']'.repeat(depth))).toThrow(/^duplicate key "a" at \[0\]/);
  });

  it('agrees with a parser that counts every key, on random texts', () => {
    // mulberry32: the same texts on every run.
    let seed = 7;
    const random = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * n);
    };
    // Keys that decode alike written differently; values that hold quotes, colons and backslashes.
    const keys = ['"a"', '"\\u0061"', '"b"', '"a:"', '"\\""'];
    const decoded = (k: string) => JSON.parse(k) as string;
    const strings = ['"x"', '"a\\":1,\\"a"', '":"', '"\\\\"', '"{\\"a\\":1}"'];
    const value = (depth: number): { text: string; twice: boolean } => {
      const pick = random(depth > 3 ? 2 : 4);
      if (pick === 0) return { text: strings[random(strings.length)], twice: false };
      if (pick === 1) return { text: String(random(100)), twice: false };
      const n = random(4);
      const parts = Array.from({ length: n }, () => value(depth + 1));
      if (pick === 2) return { text: `[${parts.map((p) => p.text).join(',')}]`, twice: parts.some((p) => p.twice) };
      const names = parts.map(() => keys[random(keys.length)]);
      const twice = new Set(names.map(decoded)).size < names.length || parts.some((p) => p.twice);
      return { text: `{${parts.map((p, i) => `${names[i]} : ${p.text}`).join(', ')}}`, twice };
    };
    let refused = 0;
    for (let i = 0; i < 2_000; i++) {
      const { text, twice } = value(0);
      if (twice) {
        refused++;
        expect(() => parse(text), text).toThrow(/^duplicate key "/);
      } else {
        expect(() => parse(text), text).not.toThrow();
      }
    }
    expect(refused).toBeGreaterThan(100);
    expect(2_000 - refused).toBeGreaterThan(100);
  });
});

/** What the text parses to with no check of keys: JSON.parse, or lossless-json's integers as bigint. */
function parseUntrustedJsonOrLossless(parse: (text: string) => unknown, text: string): unknown {
  const plain = JSON.parse(text) as unknown;
  return parse === parseJsonLossless ? JSON.parse(JSON.stringify(plain), (_k, v: unknown) => (typeof v === 'number' && Number.isInteger(v) ? BigInt(v) : v)) : plain;
}

describe('parseJsonLossless on long texts and a key twice', () => {
  const long = 'x'.repeat(5_000);

  it('refuses it whether its long strings are equal or not, and whether the key comes before them or after', () => {
    for (const text of [
      `{"msg":"${long}","msg":"${long}"}`,
      `{"msg":"${long}","msg":"${long}y"}`,
      `{"a":1,"msg":"${long}","a":1}`,
      `{"msg":"${long}","o":{"k":"${long}","k":"${long}"}}`,
    ]) {
      expect(() => parseJsonLossless(text)).toThrow(/^duplicate key "(msg|a|k)"/);
    }
    expect(parseJsonLossless(`{"msg":"${long}","o":{"msg":"${long}"}}`)).toEqual({ msg: long, o: { msg: long } });
  });

  it('names the key in the envelope when parseEnvelope refuses it', () => {
    const text = '{"to":{},"be":"/x","from":{"addr":{"inbox":"a","inbox":"b"}},"nonce":1,"opt":{"exp":2},"msg":""}';
    expect(() => parseEnvelope(text)).toThrow('duplicate key "inbox" at from.addr in the envelope');
  });
});

describe('spec files a key twice', () => {
  it('are refused, JSON and YAML alike, naming the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'dms-spec-'));
    try {
      const json = join(dir, 'spec.json');
      writeFileSync(json, '{"name":"x","image":"a","image":"b"}');
      await expect(readSpec(json)).rejects.toThrow(`${json}: duplicate key "image"`);
      const yaml = join(dir, 'spec.yaml');
      writeFileSync(yaml, 'name: x\nresources:\n  cpu: 1\n  cpu: 2\n');
      await expect(readSpec(yaml)).rejects.toThrow(`${yaml}: duplicate key at line 4, column 3`);
      writeFileSync(yaml, 'name: x\nimage: busybox\n');
      await expect(readSpec(yaml)).resolves.toEqual({ name: 'x', image: 'busybox' });
      // Empty, or not an object: said here, not sent for the node to refuse "null".
      for (const text of ['', '# nothing but a comment\n']) {
        writeFileSync(yaml, text);
        await expect(readSpec(yaml)).rejects.toThrow(`${yaml} is empty: a spec is a JSON or YAML object of fields`);
      }
      writeFileSync(yaml, '- name: x\n');
      await expect(readSpec(yaml)).rejects.toThrow(`${yaml} holds a list, not a spec: a spec is a JSON or YAML object of fields`);
      writeFileSync(json, '"busybox"');
      await expect(readSpec(json)).rejects.toThrow(`${json} holds a string, not a spec`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
