import { describe, expect, it } from 'vitest';
import { DevEvent } from '../../behaviors/dev.js';
import { devEvent, envelopeEventJson } from '../../http/routes/dev.js';
import type { SystemEvent } from '../../runtime/system.js';
import { encodePayload, type Envelope } from '../../runtime/wire/envelope.js';

const env = (topic?: string): Envelope => ({
  to: { id: '', did: '', addr: { host: '12D3KooWto', inbox: 'root' } },
  be: '/public/"quoted"\\hello',
  from: { id: 'z6Mk', did: 'did:key:z6Mk', addr: { host: '12D3KooWfrom', inbox: 'caller\n' } },
  nonce: 18446744073709551615n,
  opt: { exp: 1n, ...(topic ? { topic } : {}) },
  msg: encodePayload({ a: 1 }),
});

describe('the dev stream writes envelope events by hand', () => {
  const cases: [string, Extract<SystemEvent, { type: 'deliver' | 'send' }>][] = [
    ['out', { type: 'send', actor: 'http', env: env() }],
    ['out on a topic', { type: 'send', actor: 'http', env: env('/dms/hello') }],
    ['in, verified, with its reply time', { type: 'deliver', actor: 'root', env: env(), verified: 'signature', replyMs: 1.25 }],
    ['in, local, no reply time', { type: 'deliver', actor: 'root', env: env('/t'), verified: 'local' }],
    ['in, nothing known', { type: 'deliver', actor: 'root', env: env() }],
  ];
  it.each(cases)('%s: the same bytes as the event object, and a valid DevEvent', (_, e) => {
    const at = '2026-11-22T23:00:00.000Z';
    const json = envelopeEventJson(e, at);
    expect(json).toBe(JSON.stringify(devEvent(e, false, at)));
    expect(DevEvent.safeParse(JSON.parse(json)).success).toBe(true);
  });
});
