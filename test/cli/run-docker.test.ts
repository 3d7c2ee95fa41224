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
  it('mounts a volume of the node with -v NAME:/path, writable, and read-only with :ro, as docker run -v does', async () => {
    const made = await runCli(['--home', node.home, 'volume', 'create', 'cli-data', '--size', '8MiB']);
    expect(made.code, made.stderr).toBe(0);
    const writer = await runCli(['--home', node.home, 'run', '-v', 'cli-data:/data', TEST_IMAGE, 'sh', '-c', 'echo kept > /data/x']);
    expect(writer.code, writer.stderr).toBe(0);
    const reader = await runCli(['--home', node.home, 'run', '-v', 'cli-data:/data:ro', TEST_IMAGE, 'sh', '-c', 'cat /data/x; echo no > /data/y || echo read-only']);
    expect(reader.code, reader.stderr).toBe(0);
    expect(reader.stdout).toBe('kept\nread-only\n');
    const missing = await runCli(['--home', node.home, 'run', '-v', 'nope:/data', TEST_IMAGE, 'true']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('volume nope does not exist on this node');
  });
});
