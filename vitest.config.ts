import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';

const testsIn = (dir: string): string[] => readdirSync(new URL(`./${dir}`, import.meta.url)).filter((f) => f.endsWith('.test.ts')).map((f) => `${dir}/${f}`);

/**
 * The suite by what its files cost (README, Development):
 * - unit: pure logic in worker threads, nothing built, no node, no network.
 * - node: nodes and parts started in the test's process (DmsNode.start on port 0, real libp2p
 *   over 127.0.0.1, real SQLite files, real Docker where the file is about Docker), with short
 *   production timers set by configuration. Needs no build.
 * - process: what must be a process of its own: the built CLI (exit codes, help, stderr), kill -9,
 *   /proc of a node, the soaks, the README test, Chromium, Docker across nodes.
 * `npm test` builds and runs all three (process-alone is part of process: see ALONE);
 * `npm run test:fast` runs unit and node.
 * A file not listed in unit or node is in process, so a new file is never left out.
 */
const UNIT_NOT = [
  // Starts nodes: in node.
  'test/unit/config-file-trust.test.ts',
  // Real libp2p hosts: in node.
  'test/unit/discovery-peers.test.ts',
  // Counts what the process read from the disk, which other files' threads would add to: in node, a process of its own.
  'test/unit/block-reads.test.ts',
  // Builds a variant of dist/: in process.
  'test/unit/bench-variants.test.ts',
];
const UNIT = [
  ...testsIn('test/unit').filter((f) => !UNIT_NOT.includes(f)),
  'test/cli/client.test.ts',
  'test/outputs/blocks.test.ts',
  'test/outputs/durable-blocks.test.ts',
  'test/outputs/manifest.test.ts',
  'test/outputs/cli-files.test.ts',
  'test/outputs/retention.test.ts',
  'test/outputs/shared-blocks.test.ts',
  'test/cli/help.test.ts',
  'test/cli/operator-help.test.ts',
  'test/cli/ids.test.ts',
  'test/cli/inputs.test.ts',
  'test/cli/rest-client.test.ts',
  'test/cli/sizes.test.ts',
  'test/cli/terminal.test.ts',
  'test/jobs/image-ref.test.ts',
  'test/jobs/ledger.test.ts',
  'test/jobs/machine-rules.test.ts',
  'test/jobs/machine.test.ts',
  'test/jobs/placement.test.ts',
  'test/jobs/placement-chart.test.ts',
  'test/jobs/scheduler.test.ts',
  'test/network/bans.test.ts',
  'test/network/host.test.ts',
  'test/network/bounded-datastore.test.ts',
  'test/network/inbound-share.test.ts',
  'test/network/peer-addresses.test.ts',
  'test/resources/capacity.test.ts',
  'test/ensembles/spec.test.ts',
  'test/ensembles/machine.test.ts',
  'test/ensembles/round-trips.test.ts',
];
const NODE = [
  'test/unit/discovery-peers.test.ts',
  'test/unit/block-reads.test.ts',
  ...testsIn('test/executors'),
  'test/outputs/block-exchange.test.ts',
  'test/outputs/slow-holder.test.ts',
  'test/outputs/serve-bound.test.ts',
  'test/outputs/outputs-local.test.ts',
  'test/outputs/executor-outputs.test.ts',
  'test/outputs/storage-share.test.ts',
  'test/outputs/volume-in-use.test.ts',
  'test/outputs/read-grants.test.ts',
  'test/outputs/hostile-provider.test.ts',
  'test/outputs/input-bounds.test.ts',
  'test/jobs/attacks.test.ts',
  'test/jobs/docker-hung-engine.test.ts',
  'test/jobs/held-jobs.test.ts',
  'test/jobs/journal.test.ts',
  'test/jobs/null-jobs.test.ts',
  'test/jobs/recovery.test.ts',
  'test/jobs/redaction.test.ts',
  'test/jobs/resource-manager.test.ts',
  'test/jobs/transitions.test.ts',
  'test/multinode/pinned.test.ts',
  'test/multinode/late-join.test.ts',
  'test/multinode/lost-and-back.test.ts',
  'test/multinode/profile-changed.test.ts',
  'test/multinode/late-answers.test.ts',
  'test/multinode/placement-trips.test.ts',
  'test/multinode/bid-window.test.ts',
  'test/multinode/late-peer.test.ts',
  'test/multinode/ensembles.test.ts',
  'test/multinode/ensemble-restart.test.ts',
  'test/multinode/unanswered-start.test.ts',
  'test/multinode/cancel-unreachable.test.ts',
  'test/multinode/tunnel.test.ts',
  'test/multinode/ensemble-names.test.ts',
  'test/ensembles/start-refused.test.ts',
  'test/ensembles/net-hung-engine.test.ts',
  'test/network/dht-protocol.test.ts',
  'test/network/forward-lifetime.test.ts',
  'test/network/discovery.test.ts',
  'test/network/gossip-copies.test.ts',
  'test/network/gossip-topics.test.ts',
  'test/network/gossip-relay-rate.test.ts',
  'test/network/dht-replies.test.ts',
  'test/network/sybils.test.ts',
  'test/network/transport.test.ts',
  'test/network/tunnel-bounds.test.ts',
  'test/network/tunnel-backpressure.test.ts',
  'test/network/score.test.ts',
  'test/network/stream-drain.test.ts',
  'test/network/wire-writes.test.ts',
  'test/rest/actor-api.test.ts',
  'test/rest/fuzz.test.ts',
  'test/rest/openapi.test.ts',
  'test/rest/stalled-body.test.ts',
  'test/rest/quiet-streams.test.ts',
  'test/cli/patient-fetch.test.ts',
  'test/rest/refused-body.test.ts',
  'test/rest/http-edges.test.ts',
  'test/rest/query-params.test.ts',
  'test/security/chain-cost.test.ts',
  'test/security/closed-deployment.test.ts',
  'test/security/deployment-authz.test.ts',
  'test/security/duplicate-keys.test.ts',
  'test/security/dispatch-authz.test.ts',
  'test/security/broadcast-reply-flood.test.ts',
  'test/security/gossip-validator.test.ts',
  'test/security/hostile-requester.test.ts',
  'test/security/no-relay.test.ts',
  'test/security/reflection.test.ts',
  'test/security/remote-start-release.test.ts',
  'test/security/remote-volumes.test.ts',
  'test/security/rest-hardening.test.ts',
  'test/security/still-wanted-authz.test.ts',
  'test/security/reply-binding.test.ts',
  'test/storage/migrations.test.ts',
  'test/storage/promise-hooks.test.ts',
  'test/storage/storage.test.ts',
];

/**
 * Process files whose bounds are this node's own resources measured while it runs (RSS that must
 * come back within a time), which CPU taken by files beside them would decide instead: they run
 * after everything else, one at a time.
 */
const ALONE = [
  'test/security/log-followers.test.ts',
  // A genuine bid must reach the requester within its 500 ms window after it has read a megabyte
  // of a hostile peer's replies: with three files beside it on two cores, the reading alone took longer.
  'test/security/bid-reply-flood.test.ts',
];

const shared = { extends: true as const };

const projects: TestProjectInlineConfiguration[] = [
  { ...shared, test: { name: 'unit', include: UNIT, pool: 'threads' } },
  // In-process nodes run the sources: a plugin's `dms/plugin` is the node's own plugin API
  // (what daemon/plugin-api-resolve.ts does for the built node), never dist/.
  { ...shared, resolve: { alias: { 'dms/plugin': fileURLToPath(new URL('./behaviors/plugin.ts', import.meta.url)) } }, test: { name: 'node', include: NODE, pool: 'forks' } },
  { ...shared, test: { name: 'process', include: ['test/**/*.test.ts'], exclude: [...UNIT, ...NODE, ...ALONE], pool: 'forks' } },
  { ...shared, test: { name: 'process-alone', include: ALONE, pool: 'forks', maxWorkers: 1, sequence: { groupOrder: 1 } } },
];

export default defineConfig({
  test: {
    setupFiles: ['runtime/polyfills.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Most of a test's time is spent waiting (on a node, a timer, the network), not computing:
    // more files at once than cores keeps the 2-core CI machine busy.
    maxWorkers: 4,
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects,
  },
});
