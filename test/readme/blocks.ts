/**
 * The shell examples of a README: its ```sh blocks (with the readme-test mark just above each),
 * and any shell written in another fence, which would be passed over. Shared by the README test
 * and the examples' READMEs test.
 */

export interface Block {
  /** 1-based line of the opening fence. */
  line: number;
  code: string;
  mark?: string;
}

/** Every ```sh block of the README, with the readme-test mark just above it, if any. */
export function shellBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== '```sh') continue;
    const end = lines.findIndex((l, j) => j > i && l.trim() === '```');
    if (end < 0) throw new Error(`line ${i + 1}: a sh block that never closes`);
    const mark = /^<!-- readme-test: (.*) -->$/.exec(lines[i - 1]?.trim() ?? '')?.[1];
    blocks.push({ line: i + 1, code: lines.slice(i + 1, end).join('\n'), mark });
    i = end;
  }
  return blocks;
}

/**
 * Fences that hold shell but are not written ```sh, which shellBlocks would pass over: every
 * command example must be a ```sh block, so that it is run here (or marked skip, with why).
 */
export function otherShellFences(markdown: string, name: string): string[] {
  const found: string[] = [];
  let open = false;
  markdown.split('\n').forEach((line, i) => {
    const fence = /^\s*```(\S*)/.exec(line);
    if (!fence) return;
    if (!open && /^(bash|shell|console|zsh|shell-session|sh-session|)$/i.test(fence[1])) found.push(`${name}:${i + 1}: \`\`\`${fence[1]}`);
    open = !open;
  });
  return found;
}
