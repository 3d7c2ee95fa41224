/**
 * The line the Docker gate (test/helpers/docker.ts) prints when it skips a file's tests, and
 * its reading by the summary reporter: the one contract between them, so the reporter can
 * tell Docker skips (and their reason) from any other skipped test.
 */
const PREFIX = '[docker] skipping ';

export const dockerSkipLine = (what: string, problem: string): string => `${PREFIX}${what}: ${problem}`;

/** `{what, problem}` of a gate's line, or null for any other output. */
export function readDockerSkipLine(line: string): { what: string; problem: string } | null {
  const text = line.trim();
  if (!text.startsWith(PREFIX)) return null;
  const rest = text.slice(PREFIX.length);
  const colon = rest.indexOf(': ');
  return colon < 0 ? null : { what: rest.slice(0, colon), problem: rest.slice(colon + 2) };
}
