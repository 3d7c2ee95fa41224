// The images a node pulls for jobs, kept within jobs.max_images_bytes (actors/executors/image-cache.ts),
// against a real Docker engine pulling from a registry on 127.0.0.1 (test/helpers/registry.ts).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { NODE_LABEL } from '../../actors/executors/container-spec.js';
import { DockerExecutor } from '../../actors/executors/docker.js';
import { jobOf } from './helpers.js';
import { jobNodeScene, startLocalJobNode } from '../jobs/helpers.js';
import { waitFor } from '../helpers/network.js';

const MiB = 1024 * 1024;
/** Three images of 5 MiB of filler (and the test image's ~2 MiB each) fit in 16 MiB two at a time. */
const BOUND = 16 * MiB;
const { docker, problem } = await dockerForTests('pulled images bound tests');

describe.skipIf(problem !== null)('pulled images within jobs.max_images_bytes', () => {
  const nodeId = `test-${randomUUID()}`;
  let dir: string;
  let registry: TestRegistry;
  let executor: DockerExecutor;
  const made: string[] = [];
  const executorOf = (file: string, maxBytes = BOUND) => new DockerExecutor({ docker, nodeId, logsDir: join(dir, 'logs'), stopGraceSeconds: 1, images: { file, maxBytes } });
  const image = async (name: string, fillerBytes = 5 * MiB) => (await served(name, fillerBytes)).ref;
  const served = async (name: string, fillerBytes: number, opts?: { bytesPerSecond?: number }) => {
    const added = await registry.add(`dms-test/${name}-${randomUUID().slice(0, 8)}`, fillerBytes, opts);
    made.push(added.ref);
    return added;
  };
  const present = (ref: string) => docker.getImage(ref).inspect().then(() => true, () => false);
  const run = async (on: DockerExecutor, ref: string, command = ['true']) => {
    const handle = await on.start(jobOf({ executor: 'docker', image: ref, command }));
    const result = await on.wait(handle);
    await on.cleanup(handle);
    return result;
  };
  const recorded = (file: string) => (JSON.parse(readFileSync(file, 'utf8')) as { images: { refs: string[] }[] }).images.flatMap((r) => r.refs);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dms-images-'));
    registry = await startRegistry(docker, TEST_IMAGE);
    executor = executorOf(join(dir, 'images.json'));
  });

  afterAll(async () => {
    executor?.close();
    const left = await docker.listContainers({ all: true, filters: { label: [`${NODE_LABEL}=${nodeId}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    await Promise.all(made.map((ref) => docker.getImage(ref).remove({ force: true }).catch(() => undefined)));
    await registry?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('removes the pulled image used longest ago once a pull takes them past the bound; the images the engine had are not counted', async () => {
    const [a, b, c] = [await image('a'), await image('b'), await image('c')];
    expect(await run(executor, a)).toEqual({ exit_code: 0, oom_killed: false });
    expect(await run(executor, b)).toEqual({ exit_code: 0, oom_killed: false });
    // a is used again, so b is the one used longest ago when c's pull goes past the bound.
    expect(await run(executor, a)).toEqual({ exit_code: 0, oom_killed: false });
    expect(await run(executor, c, ['sh', '-c', 'test -s /filler.bin'])).toEqual({ exit_code: 0, oom_killed: false });
    expect({ a: await present(a), b: await present(b), c: await present(c), test: await present(TEST_IMAGE) }).toEqual({ a: true, b: false, c: true, test: true });
    expect(recorded(join(dir, 'images.json'))).toEqual([a, c]);
    expect(registry.pulls.get(a.split('/').slice(1).join('/').replace(/:latest$/, ''))).toBe(1);
  });

  it('ends the pull of an image whose layers to download are past the bound, naming both sizes, and removes nothing else', async () => {
    const kept = recorded(join(dir, 'images.json'));
    // 20 MiB at 4 MiB/s: five seconds to pull whole, so a pull that was not cut shows.
    const huge = await served('huge', 20 * MiB, { bytesPerSecond: 4 * MiB });
    await expect(executor.start(jobOf({ executor: 'docker', image: huge.ref, command: ['true'] }))).rejects.toThrow(
      new RegExp(`^image ${huge.ref.replace(/[.]/g, '\\.')} has at least 20\\.0 MiB of layers to download, more than the 16 MiB of images this node keeps \\(jobs\\.max_images_bytes\\)$`),
    );
    expect(await present(huge.ref)).toBe(false);
    // Cut at its first progress line: the engine let go of the layer long before its end.
    let last = -1;
    const sent = await waitFor(
      'the layer to stop being sent',
      async () => {
        await new Promise((r) => setTimeout(r, 300));
        const now = registry.served.get(huge.filler.digest) ?? 0;
        const still = now > 0 && now === last;
        last = now;
        return still && now;
      },
      { timeoutMs: 4_000 },
    );
    expect(sent).toBeLessThan(huge.filler.size / 2);
    // Found on a running node: the pulled images were all removed to make room that could not be made.
    expect(recorded(join(dir, 'images.json'))).toEqual(kept);
    for (const ref of kept) expect(await present(ref), ref).toBe(true);
  });

  it('fails a job whose image, measured once pulled, is past the bound (the layers the engine had count in it too), and removes it', async () => {
    const kept = recorded(join(dir, 'images.json'));
    const big = executorOf(join(dir, 'small-bound.json'), 8 * MiB);
    try {
      const ref = await image('unpacked', 7 * MiB);
      await expect(big.start(jobOf({ executor: 'docker', image: ref, command: ['true'] }))).rejects.toThrow(/^image .* is 8\.\d MiB, more than the 8 MiB of images this node keeps \(jobs\.max_images_bytes\)$/);
      expect(await present(ref)).toBe(false);
    } finally {
      big.close();
    }
    expect(recorded(join(dir, 'images.json'))).toEqual(kept);
  });

  it('keeps an image a container still uses, refuses one that cannot fit beside it, and a node started again goes on from the record', async () => {
    const [d, e, g] = [await image('d'), await image('e'), await image('g', 10 * MiB)];
    const file = join(dir, 'images.json');
    const before = recorded(file);
    // d runs on while e's pull goes past the bound: the engine keeps d (in use), the others go.
    const running = await executor.start(jobOf({ executor: 'docker', image: d, command: ['sleep', '30'] }));
    expect(await run(executor, e)).toEqual({ exit_code: 0, oom_killed: false });
    expect(await present(d)).toBe(true);
    for (const ref of before) expect(await present(ref), ref).toBe(false);
    // g fits the bound alone, not beside d: refused, and removed again (e went to make room).
    await expect(executor.start(jobOf({ executor: 'docker', image: g, command: ['true'] }))).rejects.toThrow(
      /^image .* \(1\d\.\d MiB\) does not fit beside the 6\.\d MiB of images in use here: this node keeps 16 MiB of images \(jobs\.max_images_bytes\)$/,
    );
    expect({ d: await present(d), e: await present(e), g: await present(g) }).toEqual({ d: true, e: false, g: false });
    await executor.cancel(running, 'test over');
    await executor.wait(running).catch(() => undefined);
    await executor.cleanup(running);
    expect(recorded(file)).toEqual([d]);

    // Another process with the same record: its first pull past the bound removes what the last one pulled.
    executor.close();
    executor = executorOf(file);
    const f = await image('f', 10 * MiB);
    expect(await run(executor, f)).toEqual({ exit_code: 0, oom_killed: false });
    expect({ d: await present(d), f: await present(f) }).toEqual({ d: false, f: true });
    expect(recorded(file)).toEqual([f]);
  });

  it('pulls running at once share the bound: of two images that each fit it alone but not together, the one whose download would pass it is cut', async () => {
    // 10 MiB each at 4 MiB/s: both downloads are under way at once.
    const [p, q] = [await served('p', 10 * MiB, { bytesPerSecond: 4 * MiB }), await served('q', 10 * MiB, { bytesPerSecond: 4 * MiB })];
    const outcomes = await Promise.allSettled([p, q].map((img) => run(executor, img.ref)));
    const ran = outcomes.flatMap((o, i) => (o.status === 'fulfilled' ? [[p, q][i]!.ref] : []));
    const cut = outcomes.flatMap((o, i) => (o.status === 'rejected' ? [{ ref: [p, q][i]!.ref, error: (o.reason as Error).message }] : []));
    expect(ran).toHaveLength(1);
    expect(cut).toEqual([
      {
        ref: expect.any(String),
        error: expect.stringMatching(/ has at least 10\.0 MiB of layers to download, which do not fit beside the 10\.0 MiB the pulls running here are downloading: this node keeps 16 MiB of images \(jobs\.max_images_bytes\)$/),
      },
    ]);
    expect(cut[0]!.error.startsWith(`image ${cut[0]!.ref} `)).toBe(true);
    expect({ ran: await present(ran[0]!), cut: await present(cut[0]!.ref) }).toEqual({ ran: true, cut: false });
    // Cut as its download started, not refused once landed: the other's 2.5 s of download left most of it unsent.
    const cutFiller = [p, q].find((img) => img.ref === cut[0]!.ref)!.filler;
    expect(registry.served.get(cutFiller.digest) ?? 0).toBeLessThan(cutFiller.size / 2);
    // The cut pull's layers no longer count: the next image of the same size pulls.
    const r = await image('r', 10 * MiB);
    expect(await run(executor, r)).toEqual({ exit_code: 0, oom_killed: false });
    expect(recorded(join(dir, 'images.json'))).toEqual([r]);
  });

  it('a bound lowered since the last start is kept at the next start, before any pull', async () => {
    const file = join(dir, 'images.json');
    const [kept] = recorded(file);
    expect(await present(kept!)).toBe(true);
    executor.close();
    // The image on record (~12 MiB) is past a bound of 4 MiB: removed as the executor starts.
    executor = executorOf(file, 4 * MiB);
    await executor.reconcile([]);
    await waitFor('the image past the lowered bound removed, and its record', async () => (!(await present(kept!)) && recorded(file).length === 0) || undefined, { timeoutMs: 10_000 });
    executor.close();
    executor = executorOf(file);
  });

  it('a node takes its bound from jobs.max_images_bytes: a job submitted there with an image past it fails naming it; /metrics says what the pulled images hold', async () => {
    const ref = await image('node', 9 * MiB);
    const scene = await jobNodeScene(() => startLocalJobNode({ jobs: { max_images_bytes: 8 * MiB, allowed_registries: [registry.host] } }));
    try {
      const submitted = await scene.rest.submit({ name: 'too-big', image: ref, command: ['true'], executor: 'docker' });
      const ended = await scene.rest.waitFor(submitted.id);
      expect(ended.status).toBe('failed');
      expect(ended.error).toMatch(/has at least 9\.\d MiB of layers to download, more than the 8 MiB of images this node keeps \(jobs\.max_images_bytes\)/);
      expect(await present(ref)).toBe(false);
      // One that fits runs, and /metrics says what the pulled images hold.
      const small = await image('node-small', 1 * MiB);
      const ran = await scene.rest.waitFor((await scene.rest.submit({ name: 'fits', image: small, command: ['true'], executor: 'docker' })).id);
      expect(ran.status, ran.error ?? '').toBe('completed');
      const metrics = await (await fetch(`${scene.node.url}/metrics`)).text();
      const held = Number(/^dms_pulled_images\{measure="bytes"\} (\d+)$/m.exec(metrics)?.[1]);
      expect(held).toBe((await docker.getImage(small).inspect()).Size);
      expect(metrics).toMatch(/^dms_pulled_images\{measure="images"\} 1$/m);
      // ...as the node's usage does, beside the share (dms resources show).
      const usage = (await (await fetch(`${scene.node.url}/api/v1/resources/usage`)).json()) as { images: unknown };
      expect(usage.images).toEqual({ bytes: held, count: 1, max_bytes: 8 * MiB });
    } finally {
      await scene.stop();
    }
  });
});
