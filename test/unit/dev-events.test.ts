import { unsubscribe } from 'node:diagnostics_channel';
import { describe, expect, it, onTestFinished } from 'vitest';
import { DevEvent, DevStreamQuery } from '../../behaviors/dev.js';
import { devEvent, envelopeEventJson } from '../../http/routes/dev.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { ActorSystem, type SystemEvent } from '../../runtime/system.js';
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

describe('the dms:event channel', () => {
  const system = () => new ActorSystem({ key: KeyPair.generate(), log: silentLogger(), mailbox: { capacity: 8, concurrency: 1 } });

  it("is watched only while subscribed, by bench:invoke's preloaded subscriber too, and each system's stream holds its own events", async () => {
    const mine = system();
    const other = system();
    expect(mine.watched).toBe(false);
    const { drop } = await import('../../bench/lib/subscribe-events.mjs');
    onTestFinished(() => void unsubscribe('dms:event', drop));
    expect(mine.watched).toBe(true);
    const seen: SystemEvent[] = [];
    const sub = mine.events.subscribe((e) => seen.push(e));
    other.deadLetter(env(), 'theirs');
    mine.deadLetter(env(), 'mine');
    expect(seen).toEqual([{ type: 'dead-letter', env: env(), reason: 'mine' }]);
    sub.unsubscribe();
    unsubscribe('dms:event', drop);
    expect(mine.watched).toBe(false);
    mine.deadLetter(env(), 'unwatched');
    expect(seen).toHaveLength(1);
  });
});

describe("the dev stream's filters", () => {
  it('refuse an empty list, which matched no event: the watcher saw nothing and was not told why', () => {
    for (const name of ['actor', 'behavior', 'topic', 'type'] as const) {
      for (const value of ['', ',', ' , ']) {
        const r = DevStreamQuery.safeParse({ [name]: value });
        expect(r.success, `${name}=${JSON.stringify(value)}`).toBe(false);
        expect(r.error?.issues[0]?.message).toMatch(/names nothing: leave the parameter out to see every event/);
      }
    }
    expect(DevStreamQuery.parse({ type: 'envelope,transition', actor: 'root' })).toEqual({ type: ['envelope', 'transition'], actor: ['root'] });
  });
});
