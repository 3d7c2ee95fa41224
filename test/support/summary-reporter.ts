import type { UserConsoleLog } from 'vitest';
import type { Reporter, TestModule } from 'vitest/node';
import { readDockerSkipLine } from './docker-skips.js';

/**
 * Ends the run with one plain `Tests: N passed, N failed, N skipped` line, the form CI
 * reads from any runner; the default reporter's summary is decorated and not machine-read.
 * When the Docker gate skipped files (no engine, or no test image; DMS_REQUIRE_DOCKER unset), a
 * line after it says how many tests that was and why: a run without Docker must not read as a full pass.
 */
export default class SummaryReporter implements Reporter {
  /** Gated modules (by id) with the gate's description and reason. */
  private readonly dockerSkips = new Map<string, { what: string; problem: string }>();

  onUserConsoleLog(log: UserConsoleLog): void {
    const skip = readDockerSkipLine(log.content);
    // The gate runs while the file is collected, so the log's task is the file's module.
    if (skip && log.taskId) this.dockerSkips.set(log.taskId, skip);
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = unhandledErrors.length;
    let skipped = 0;
    let dockerSkipped = 0;
    const reasons: string[] = [];
    const problems = new Set<string>();
    for (const mod of modules) {
      if (mod.state() === 'failed' && [...mod.children.allTests()].length === 0) failed++;
      const gate = this.dockerSkips.get(mod.id);
      let moduleSkipped = 0;
      for (const test of mod.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else (skipped++, moduleSkipped++);
      }
      if (gate && moduleSkipped > 0) {
        dockerSkipped += moduleSkipped;
        reasons.push(`  ${gate.what}: ${gate.problem}`);
        problems.add(gate.problem);
      }
    }
    process.stdout.write(`\nTests: ${passed} passed, ${failed} failed, ${skipped} skipped\n`);
    if (dockerSkipped > 0) {
      // The cause in the headline when the files share one (no engine, or only the test image
      // missing while the engine runs): the two are fixed differently.
      const cause = problems.size === 1 ? [...problems][0] : 'for the reasons below';
      process.stdout.write(`Docker: ${dockerSkipped} tests skipped (${cause}; set DMS_REQUIRE_DOCKER=1 to make that a failure)\n${reasons.sort().join('\n')}\n`);
    }
  }
}
