import { expect, it } from 'vitest';

/**
 * A gate for tests that need something of the machine (a tool, a name that resolves): without
 * it they are skipped, and the run says so on stderr, naming what is missing, unless `envVar`=1
 * (as .ci/run sets) makes its absence a failing test. Never a silent skip. Call it while the
 * file is collected; returns whether the gated tests run.
 */
export function gate(what: string, problem: string | null, envVar: string): boolean {
  const required = process.env[envVar] === '1';
  if (problem !== null && !required) console.warn(`[skip] ${what}: ${problem} (set ${envVar}=1 to make that a failure)`);
  it.runIf(problem !== null && required)(`has what ${what} needs, as ${envVar}=1 demands`, () => {
    expect.fail(problem ?? '');
  });
  return problem === null;
}
