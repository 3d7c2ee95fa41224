// `dms run` with a real container (gated like every Docker test: skipped with the reason
// without an engine, a failure under DMS_REQUIRE_DOCKER=1).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, stopDockerNodes, TEST_IMAGE } from '../helpers/docker.js';
import { type NodeProcess, runCli } from '../helpers/node.js';
import { startJobNode } from '../jobs/helpers.js';

const { docker, problem } = await dockerForTests('dms run Docker test');

describe.skipIf(problem !== null)('dms run with the Docker executor', () => {
  let node: NodeProcess;

  beforeAll(async () => {
    node = await startJobNode();
  });

  afterAll(() => stopDockerNodes(docker, [node]));

  it('runs IMAGE CMD… like docker run: the command\'s own flags pass through, its output and exit code come back', async () => {
    const r = await runCli(['--home', node.home, 'run', TEST_IMAGE, '--cpu', '0.5', '--memory', '64MiB', 'sh', '-c', 'echo from busybox; echo oops >&2; exit 3']);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stdout).toBe('from busybox\n');
    expect(r.stderr).toContain('oops\n');
    expect(r.stderr).toMatch(/failed \(exit code 3\)/);
  });
});
