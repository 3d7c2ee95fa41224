import Docker from 'dockerode';
import { expect, it } from 'vitest';
import { probeDocker } from '../../actors/executors/engine.js';
import { dockerSkipLine } from '../support/docker-skips.js';
import { stopCluster } from './network.js';
import { type NodeProcess, removeHome, type TestNode } from './node.js';

/** Built by .ci/docker-setup.sh with `docker import`: no registry is reachable. */
export const TEST_IMAGE = 'dms-test/busybox:latest';

/**
 * dd allocates its block size at once: a 64 MiB block in a 16 MiB container is killed by the
 * kernel's OOM killer. The engine learns of the kill from a notifier on the container's cgroup
 * (an eventfd under cgroup v1, as on CI) that containerd sets up as the container starts; a
 * full CI run saw a kill in the container's first instant never reported at all, whoever asked,
 * most likely one that came before the notifier. So the shell waits a second before dd, and
 * outlives the kill by another: a loaded engine can also remove the cgroup before reading a
 * kill that ends the container at the same instant.
 */
export const OVER_ITS_MEMORY = ['sh', '-c', 'sleep 1; dd if=/dev/zero of=/dev/null bs=64M count=1; s=$?; sleep 1; exit $s'];


async function engineProblem(docker: Docker): Promise<string | null> {
  const probe = await probeDocker(docker);
  if (!probe.ok) return probe.reason;
  try {
    await docker.getImage(TEST_IMAGE).inspect();
    return null;
  } catch {
    return `the test image ${TEST_IMAGE} is missing (run .ci/docker-setup.sh)`;
  }
}

/**
 * Whether this machine can run the Docker tests of a file. Without an engine they are skipped
 * with the reason printed, unless DMS_REQUIRE_DOCKER=1 (as in CI), where a test registered
 * here fails instead: a missing engine must not pass as a green run.
 */
export async function dockerForTests(what: string): Promise<{ docker: Docker; problem: string | null }> {
  const docker = new Docker();
  const problem = await engineProblem(docker);
  const required = process.env.DMS_REQUIRE_DOCKER === '1';
  if (problem && !required) console.warn(dockerSkipLine(what, problem));
  it.runIf(problem !== null && required)('has a Docker engine, as DMS_REQUIRE_DOCKER=1 demands', () => {
    expect.fail(problem ?? '');
  });
  return { docker, problem };
}

/**
 * Removes every container `node` left (they carry its peer id): a node leaves its jobs'
 * containers to find again when it restarts, which a test's node, once stopped, never does.
 */
export async function removeContainersOf(docker: Docker, node: Pick<TestNode, 'peerId'>): Promise<void> {
  const left = await docker.listContainers({ all: true, filters: { label: [`dms.node=${node.peerId}`] } });
  await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
}

/** Stops the nodes one after the other, each followed by the removal of the containers it left and of its home. */
export async function stopDockerNodes(docker: Docker, nodes: (TestNode | undefined)[]): Promise<void> {
  for (const n of nodes) {
    if (!n) continue;
    await n.stop();
    await removeContainersOf(docker, n);
    removeHome(n.home);
  }
}

/**
 * Removes every container the nodes left behind, stops them, then removes the networks they
 * left: a node killed in a test never starts again to remove its own, and each one kept takes
 * one of the engine's ~30 address pools until none is left for the next run's networks.
 */
export async function stopSharingCluster(docker: Docker, nodes: NodeProcess[]): Promise<void> {
  for (const n of nodes) await removeContainersOf(docker, n);
  await stopCluster(nodes);
  for (const n of nodes) {
    const networks = await docker.listNetworks({ filters: { label: [`dms.node=${n.peerId}`] } });
    await Promise.all(networks.map((net) => docker.getNetwork(net.Id).remove().catch(() => undefined)));
  }
}
