import { describe, expect, it } from 'vitest';
import { fitsWithin, ResourceLedger } from '../../actors/resources/ledger.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { DmsError } from '../../runtime/errors.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const spec = (cores: number, memory: number, storage = 0, gpus?: number): ResourceSpec => ({
  cpu: { cores },
  memory: { size: memory },
  storage: { size: storage },
  ...(gpus ? { gpu: { count: gpus } } : {}),
});

function conflict(fn: () => void): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(DmsError);
    expect((e as DmsError).kind).toBe('conflict');
    return (e as DmsError).message;
  }
  return expect.fail('expected a conflict');
}

describe('resource ledger', () => {
  it('reserves what fits and refuses over-commit, naming the short resource and the numbers', () => {
    const ledger = new ResourceLedger(spec(2, 4 * GiB, 10 * GiB));
    ledger.reserve('a', spec(1.5, 1 * GiB));
    expect(conflict(() => ledger.reserve('b', spec(1, 1 * GiB)))).toBe('not enough cpu: 1 core asked, 0.5 cores free of 2 cores onboarded');
    expect(conflict(() => ledger.reserve('b', spec(0.5, 4 * GiB)))).toBe('not enough memory: 4 GiB asked, 3 GiB free of 4 GiB onboarded');
    expect(conflict(() => ledger.reserve('b', spec(0.5, 1, 11 * GiB)))).toMatch(/^not enough storage: 11 GiB asked, 10 GiB free/);
    ledger.reserve('b', spec(0.5, 3 * GiB));
    expect(ledger.free()).toEqual(spec(0, 0, 10 * GiB));
    expect(ledger.allocated()).toEqual(spec(2, 4 * GiB));
  });

  it('adds and releases fractions of a core exactly', () => {
    const ledger = new ResourceLedger(spec(100, GiB));
    for (let i = 0; i < 1000; i++) ledger.reserve(`j${i}`, spec(0.1, MiB / 1024));
    expect(ledger.allocated().cpu.cores).toBe(100);
    expect(ledger.shortfall(spec(0.001, 0))).toMatch(/^not enough cpu/);
    for (let i = 0; i < 1000; i++) expect(ledger.release(`j${i}`)).toBe(true);
    expect(ledger.allocated()).toEqual(spec(0, 0));
    expect(ledger.release('j0')).toBe(false);
  });

  it('keeps what is held when the offer shrinks, and offers nothing more until it is released', () => {
    const ledger = new ResourceLedger(spec(4, 4 * GiB));
    ledger.reserve('a', spec(3, 3 * GiB));
    ledger.offer(spec(2, 2 * GiB));
    expect(ledger.free()).toEqual(spec(0, 0));
    expect(ledger.shortfall(spec(0.5, 0))).toMatch(/^not enough cpu: 0.5 cores asked, 0 cores free of 2 cores/);
    // Forced reservations (runs found still going after a restart) go through regardless.
    ledger.reserve('b', spec(1, GiB), true);
    expect(ledger.allocated()).toEqual(spec(4, 4 * GiB));
    ledger.release('a');
    ledger.release('b');
    expect(ledger.free()).toEqual(spec(2, 2 * GiB));
  });

  it('counts GPUs and checks model and per-GPU memory against what is offered', () => {
    const ledger = new ResourceLedger({ ...spec(8, 8 * GiB), gpu: { count: 2, model: 'NVIDIA A100', vram: 40 * GiB } });
    expect(ledger.shortfall({ ...spec(1, GiB), gpu: { count: 1, model: 'a100' } })).toBeNull();
    expect(ledger.shortfall({ ...spec(1, GiB), gpu: { count: 1, model: 'H100' } })).toBe('no gpu of model H100: this node offers NVIDIA A100');
    expect(ledger.shortfall({ ...spec(1, GiB), gpu: { count: 1, vram: 80 * GiB } })).toMatch(/^not enough gpu memory: 80 GiB asked per GPU/);
    ledger.reserve('a', { ...spec(1, GiB), gpu: { count: 2 } });
    expect(ledger.allocated().gpu).toEqual({ count: 2, model: 'NVIDIA A100', vram: 40 * GiB });
    expect(ledger.free().gpu).toBeUndefined();
    expect(ledger.shortfall({ ...spec(1, GiB), gpu: { count: 1 } })).toBe('not enough gpu: 1 GPUs asked, 0 free of 2 onboarded');
    expect(new ResourceLedger(spec(1, GiB)).shortfall({ ...spec(1, GiB), gpu: { count: 1 } })).toBe('not enough gpu: this node offers no GPU');
  });

  it('holds at least 0.01 cores for any amount above 0, rounding up to whole millicores', () => {
    const ledger = new ResourceLedger(spec(0.2, GiB));
    // 20 holders of 1e-10 cores used to hold nothing at all (rounded to 0 millicores).
    for (let i = 0; i < 20; i++) ledger.reserve(`tiny${i}`, spec(1e-10, MiB));
    expect(ledger.allocated().cpu.cores).toBe(0.2);
    expect(conflict(() => ledger.reserve('one-more', spec(1e-10, MiB)))).toBe('not enough cpu: 0.01 cores asked, 0 cores free of 0.2 cores onboarded');
    const rounding = new ResourceLedger(spec(1, GiB));
    rounding.reserve('a', spec(0.0101, MiB));
    rounding.reserve('b', spec(0.57, MiB));
    expect(rounding.allocated().cpu.cores).toBe(0.581);
  });

  it('refuses a second reservation under the same key', () => {
    const ledger = new ResourceLedger(spec(4, GiB));
    ledger.reserve('a', spec(1, 0));
    expect(conflict(() => ledger.reserve('a', spec(1, 0)))).toBe('a already holds resources');
  });

  it('tells whether one spec fits within another in every resource', () => {
    expect(fitsWithin(spec(1, GiB), spec(1, GiB))).toBe(true);
    expect(fitsWithin(spec(1, GiB, 1), spec(1, GiB))).toBe(false);
    expect(fitsWithin(spec(0.5, 2 * GiB), spec(1, GiB))).toBe(false);
  });
});
