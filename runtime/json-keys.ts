import { invalid } from './errors.js';

/**
 * Object keys in JSON text, and text that holds one twice. JSON.parse keeps the last of two
 * values of a key, and lossless-json the one value of two equal ones, without a word; a proxy,
 * an auditing tool or another implementation of the wire format (README "Wire format") may keep
 * the first, and then it and the node disagree about what was sent or signed. Text from outside
 * is refused instead (refuseDuplicateKeys).
 */

const BACKSLASH = 0x5c;

/**
 * Where the string token starting at `start` (its opening quote) ends: the index after its
 * closing quote, or -1 when it has none. Outside strings JSON has no quote, so each unescaped
 * quote ends the string; found with indexOf, each quote's preceding backslashes counted once,
 * never a backtracking scan.
 */
export function stringEnd(text: string, start: number): number {
  let end = start + 1;
  for (;;) {
    end = text.indexOf('"', end);
    if (end === -1) return -1;
    let backslashes = 0;
    while (text.charCodeAt(end - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return end + 1;
    end++;
  }
}

/** Whether the string token ending before `end` is a key: a colon follows it (after whitespace). */
export function isKeyAt(text: string, end: number): boolean {
  let i = end;
  while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  return text[i] === ':';
}

/**
 * Throws `invalid`, naming the key and where it is, when `text` holds an object with a key
 * twice; `value` is what it parsed to. A parse already ran, so this adds no second one: every
 * string token of the text is a key or a string value, and `value` holds each of them but those
 * a key written twice dropped (the overwritten key, and its value with every string in it). So
 * the string tokens are counted (quotes, found with indexOf) against the keys and strings
 * `value` holds, which are fewer exactly when some key came twice. Only then is the text read
 * again, to say which. `where` ends the message (`the request body`).
 */
export function refuseDuplicateKeys(text: string, value: unknown, where?: string): void {
  if (typeof value !== 'object' || value === null) return;
  if (stringsHeld(value) !== stringsWritten(text)) throw duplicateKey(text, where);
}

/** The `invalid` error for text known to hold a key twice: the first such key, the object it is in, and `where`. */
export function duplicateKey(text: string, where?: string): Error {
  const found = firstDuplicate(text);
  const what = found ? `duplicate key ${JSON.stringify(clip(found.key, 100))}${found.path ? ` at ${clip(found.path, 200)}` : ''}` : 'a key twice';
  return invalid(`${what}${where ? ` in ${where}` : ''}`);
}

const clip = (s: string, max: number) => (s.length > max ? `${s.slice(0, max)}…` : s);

/**
 * Keys and string values of a parsed value. Iterative: V8 parses JSON nested deeper than a stack
 * of calls would go. `for in` allocates nothing; above a parsed object is only Object.prototype,
 * none of whose properties is enumerable.
 */
function stringsHeld(value: object): number {
  let count = 0;
  const stack: object[] = [value];
  while (stack.length > 0) {
    const v = stack.pop() as Record<string, unknown> | unknown[];
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const child = v[i];
        if (typeof child === 'string') count++;
        else if (typeof child === 'object' && child !== null) stack.push(child);
      }
    } else {
      for (const key in v) {
        count++;
        const child = v[key];
        if (typeof child === 'string') count++;
        else if (typeof child === 'object' && child !== null) stack.push(child);
      }
    }
  }
  return count;
}

/** String tokens of valid JSON text. Without a backslash no quote is escaped: each pair of quotes is one. */
function stringsWritten(text: string): number {
  let count = 0;
  if (!text.includes('\\')) {
    for (let i = text.indexOf('"'); i !== -1; i = text.indexOf('"', i + 1)) count++;
    return count / 2;
  }
  for (let start = text.indexOf('"'); start !== -1; ) {
    const end = stringEnd(text, start);
    if (end === -1) break;
    count++;
    start = text.indexOf('"', end);
  }
  return count;
}

interface Level {
  /** An object's keys so far; undefined for an array. */
  keys?: Set<string>;
  /** The last key read (an object), or the index of the element being read (an array). */
  key: string;
  index: number;
  /** How its parent names it: `.key` or `[i]`; empty for the outermost value. */
  label: string;
}

/**
 * The first key some object of `text` holds twice (its decoded value: `"a"` and `"\u0061"` are
 * one key), and the path of that object (`resources`, `parts[2].env`, empty at the top). Reads
 * the text once, strings skipped with indexOf; valid JSON up to the duplicate is assumed.
 */
function firstDuplicate(text: string): { key: string; path: string } | undefined {
  const levels: Level[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const end = stringEnd(text, i);
      if (end === -1) return undefined;
      const top = levels[levels.length - 1];
      if (top?.keys && isKeyAt(text, end)) {
        const key = JSON.parse(text.slice(i, end)) as string;
        if (top.keys.has(key)) return { key, path: levels.map((l) => l.label).join('').replace(/^\./, '') };
        top.keys.add(key);
        top.key = key;
      }
      i = end - 1;
    } else if (c === '{' || c === '[') {
      const parent = levels[levels.length - 1];
      const label = parent === undefined ? '' : parent.keys ? `.${parent.key}` : `[${parent.index}]`;
      levels.push({ keys: c === '{' ? new Set() : undefined, key: '', index: 0, label });
    } else if (c === '}' || c === ']') {
      levels.pop();
    } else if (c === ',') {
      const top = levels[levels.length - 1];
      if (top && !top.keys) top.index++;
    }
  }
  return undefined;
}
