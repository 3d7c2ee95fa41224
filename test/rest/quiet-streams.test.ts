/**
 * Event streams with nothing to say. `dms jobs logs -f` of a job that printed nothing for 300 s
 * stopped there (found by following a quiet null job from a running node, .scratch): Node's
 * fetch, which `dms` and most scripts read with, ends a response whose body brings nothing for
 * that long. A quiet stream now writes a comment line every `rest.sse_keepalive_s`, which readers
 * of server-sent events skip; here it is 1 s, so each case waits seconds, not minutes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEV_STREAM_PATH } from '../../behaviors/dev.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';

let node: LocalNode;

beforeAll(async () => {
  node = await startLocalNode({ config: { network: { enabled: false }, general: { debug: true }, rest: { sse_keepalive_s: 1 } } });
}, 30_000);
afterAll(() => node?.stop());

/** What `res`'s body brings, as text, until `done` says it has what it waited for or `ms` pass; then the stream is let go. */
async function readUntil(res: Response, done: (text: string) => boolean, ms: number): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const timer = setTimeout(() => void reader.cancel(), ms);
  try {
    for (;;) {
      const { value, done: ended } = await reader.read();
      if (ended) break;
      text += decoder.decode(value, { stream: true });
      if (done(text)) break;
    }
  } finally {
    clearTimeout(timer);
    await reader.cancel().catch(() => undefined);
  }
  return text;
}

const comments = (text: string) => text.split('\n').filter((l) => l === ': keep-alive').length;

describe('an event stream with nothing to say', () => {
  it('following a job that prints nothing: a keep-alive comment each second, then the job’s end as before', { timeout: 20_000 }, async () => {
    const spec = { name: 'quiet', image: 'none', executor: 'null', environment: { DMS_NULL_DURATION_MS: '3500' }, resources: { cpu: { cores: 0.01 }, memory: { size: 1024 } } };
    const job = (await (await fetch(`${node.url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) })).json()) as { id: string };
    const res = await fetch(`${node.url}/api/v1/jobs/${job.id}/logs?follow=true`);
    expect(res.status).toBe(200);
    const text = await readUntil(res, (t) => t.includes('event: end'), 15_000);
    expect(text, 'the stream ends with the job').toContain('event: end');
    // Polls wait 5 s for news: the first comment comes with the first empty poll after 1 s.
    expect(comments(text), `keep-alive comments while the job ran quietly, in:\n${text}`).toBeGreaterThanOrEqual(1);
    expect(text).not.toContain('event: log');
  });

  it('the dev stream, its filters leaving nothing of a quiet node: a keep-alive comment each second', { timeout: 20_000 }, async () => {
    const res = await fetch(`${node.url}${DEV_STREAM_PATH}?actor=nobody-here`);
    expect(res.status).toBe(200);
    const text = await readUntil(res, (t) => comments(t) >= 2, 10_000);
    expect(comments(text), `keep-alive comments in:\n${text}`).toBeGreaterThanOrEqual(2);
    expect(text).not.toContain('event: dms');
  });
});
