// The one decision of whether any known node could ever hold a job (actors/orchestrator/placement.ts).
import { describe, expect, it } from 'vitest';
import { labelMismatch, whyNoNodeCouldHold } from '../../behaviors/jobs/fit.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { GiB, MiB } from './helpers.js';

const spec = (s: Partial<ResourceSpec> = {}): ResourceSpec => ({ cpu: { cores: 1 }, memory: { size: 512 * MiB }, storage: { size: 0 }, ...s });
const machine = spec({ cpu: { cores: 2 }, memory: { size: 4 * GiB }, storage: { size: 10 * GiB } });
const self = { label: 'this node', capacity: machine };

describe('whyNoNodeCouldHold', () => {
  it('lets through what the machine could hold, even all of it', () => {
    expect(whyNoNodeCouldHold(spec(), [self])).toBeNull();
    expect(whyNoNodeCouldHold(machine, [self])).toBeNull();
    expect(whyNoNodeCouldHold(spec({ cpu: { cores: 0.1 + 0.2 } }), [{ label: 'this node', capacity: spec({ cpu: { cores: 0.3 } }) }])).toBeNull();
  });

  it('names the first resource the machine lacks', () => {
    expect(whyNoNodeCouldHold(spec({ cpu: { cores: 64 } }), [self])).toBe('needs 64 cores; this node has at most 2 (no known node could hold it)');
    expect(whyNoNodeCouldHold(spec({ memory: { size: 8 * GiB } }), [self])).toBe('needs 8 GiB of memory; this node has at most 4 GiB (no known node could hold it)');
    expect(whyNoNodeCouldHold(spec({ storage: { size: 20 * GiB } }), [self])).toBe('needs 20 GiB of storage; this node has at most 10 GiB (no known node could hold it)');
  });

  it('judges GPUs by count, model and memory per GPU', () => {
    const gpus = { label: 'this node', capacity: { ...machine, gpu: { count: 2, model: 'NVIDIA A100', vram: 40 * GiB } } };
    expect(whyNoNodeCouldHold(spec({ gpu: { count: 1 } }), [self])).toBe('needs 1 GPU; this node has none (no known node could hold it)');
    expect(whyNoNodeCouldHold(spec({ gpu: { count: 3 } }), [gpus])).toBe('needs 3 GPUs; this node has at most 2 (no known node could hold it)');
    expect(whyNoNodeCouldHold(spec({ gpu: { count: 1, model: 'H100' } }), [gpus])).toBe('needs a GPU of model H100; this node has NVIDIA A100 (no known node could hold it)');
    expect(whyNoNodeCouldHold(spec({ gpu: { count: 1, vram: 80 * GiB } }), [gpus])).toBe(
      "needs 80 GiB of memory per GPU; this node's GPUs have 40 GiB (no known node could hold it)",
    );
    expect(whyNoNodeCouldHold(spec({ gpu: { count: 2, model: 'a100', vram: 40 * GiB } }), [gpus])).toBeNull();
  });

  it('lets a job through when any candidate could hold it, and when none is known', () => {
    const big = { label: 'peer big', capacity: spec({ cpu: { cores: 128 }, memory: { size: 1024 * GiB } }) };
    expect(whyNoNodeCouldHold(spec({ cpu: { cores: 64 } }), [self, big])).toBeNull();
    expect(whyNoNodeCouldHold(spec({ cpu: { cores: 64 } }), [])).toBeNull();
  });
});

describe('labelMismatch', () => {
  it('matches a node\'s own labels only, and names what it has of them', () => {
    expect(labelMismatch({ gpu: 'a100' }, { gpu: 'a100', zone: 'lab' })).toBeNull();
    expect(labelMismatch({ gpu: 'a100' }, { gpu: 'v100' })).toBe('lacks label gpu=a100 (has gpu=v100)');
    // Every object has a toString: a node's profile has no such label, and the message said it had a function.
    expect(labelMismatch({ toString: 'x' }, {})).toBe('lacks label toString=x');
    expect(labelMismatch({ constructor: 'x' }, { constructor: 'x' } as never)).toBeNull();
  });
});
