import { describe, expect, it } from 'vitest';
import { terminalSafe } from '../../cli/terminal.js';

describe('text from others, as the CLI prints it', () => {
  it('shows what a terminal would obey as its \\u escape', () => {
    // Clipboard write (OSC 52), clear screen, carriage return over the line, CSI as one C1 byte, bell.
    expect(terminalSafe('a\x1b]52;c;cHduZWQ=\x07b')).toBe('a\\u001b]52;c;cHduZWQ=\\u0007b');
    expect(terminalSafe('ok\x1b[2J\x1b[Hdone')).toBe('ok\\u001b[2J\\u001b[Hdone');
    expect(terminalSafe('fine\rforged')).toBe('fine\\u000dforged');
    expect(terminalSafe('x\u009b31my')).toBe('x\\u009b31my');
    expect(terminalSafe('\x00\x7f')).toBe('\\u0000\\u007f');
  });

  it('shows bidirectional controls, which reorder what is read', () => {
    expect(terminalSafe('invoice\u202Efdp.exe')).toBe('invoice\\u202efdp.exe');
    expect(terminalSafe('\u2066a\u2069\u200f')).toBe('\\u2066a\\u2069\\u200f');
  });

  it('keeps line breaks, tabs and every other character as they are', () => {
    const text = 'line 1\n\tline 2 — é, 日本, 🙂, "quotes" and \\ backslash';
    expect(terminalSafe(text)).toBe(text);
  });
});
