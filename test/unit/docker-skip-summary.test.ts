// The run's last lines name the real cause of the Docker skips: an engine that runs without the
// test image is not "no engine", and the two are fixed differently.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { dockerSkipLine } from '../support/docker-skips.js';
import SummaryReporter from '../support/summary-reporter.js';

const skippedModule = (id: string) =>
  ({
    id,
    state: () => 'skipped',
    children: { *allTests() { yield { result: () => ({ state: 'skipped' }) }; } },
  }) as never;

function summary(problems: Record<string, string>): string {
  let out = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
  const reporter = new SummaryReporter();
  for (const [id, problem] of Object.entries(problems)) reporter.onUserConsoleLog({ content: dockerSkipLine(`file ${id}`, problem), taskId: id } as never);
  reporter.onTestRunEnd(Object.keys(problems).map(skippedModule), []);
  return out;
}

afterEach(() => vi.restoreAllMocks());

describe('the Docker skip summary', () => {
  it('says the test image is missing when that is why, not that there is no engine', () => {
    const missing = 'the test image dms-test/busybox:latest is missing (run .ci/docker-setup.sh)';
    const out = summary({ a: missing, b: missing });
    expect(out).toContain(`Docker: 2 tests skipped (${missing}; set DMS_REQUIRE_DOCKER=1 to make that a failure)`);
    expect(out).not.toContain('no engine');
  });

  it('points at the per-file reasons when they differ', () => {
    const out = summary({ a: 'no Docker engine answers (connect ENOENT)', b: 'the test image dms-test/busybox:latest is missing (run .ci/docker-setup.sh)' });
    expect(out).toContain('Docker: 2 tests skipped (for the reasons below; set DMS_REQUIRE_DOCKER=1 to make that a failure)');
    expect(out).toContain('  file a: no Docker engine answers (connect ENOENT)');
  });
});
