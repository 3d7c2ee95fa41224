// In process, from the command tree the CLI parses with (cli/program.ts): every option's help
// says its default once, and `dms run` reads its own options only up to the command.
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { endRunOptions } from '../../cli/commands/run.js';
import { buildProgram } from '../../cli/program.js';

function* commands(cmd: Command, path: string[] = []): Generator<[string[], Command]> {
  yield [path, cmd];
  for (const sub of cmd.commands) yield* commands(sub, [...path, sub.name()]);
}

describe('help texts', () => {
  it('say each default once: commander prints `(default: …)` for an option given one, so the description does not', () => {
    const doubled: string[] = [];
    for (const [path, cmd] of commands(buildProgram())) {
      const help = cmd.helpInformation();
      for (const line of help.split('\n')) if (/\(default[ :][^)]*\).*\(default: /.test(line)) doubled.push(`dms ${path.join(' ')}: ${line.trim()}`);
    }
    expect(doubled).toEqual([]);
  });

  it('list onboard and offboard, with the share, labels and location flags', () => {
    const program = buildProgram();
    const onboard = program.commands.find((c) => c.name() === 'onboard')!;
    expect(onboard.options.map((o) => o.long)).toEqual(expect.arrayContaining(['--cpu', '--memory', '--disk', '--gpu', '--label', '--region', '--country', '--city', '--show']));
    expect(program.commands.find((c) => c.name() === 'offboard')!.options.map((o) => o.long)).toEqual(['--force']);
    expect(program.commands.find((c) => c.name() === 'init')!.options.map((o) => o.long)).toContain('--onboard');
  });
});

describe("dms run's options end where the command begins", () => {
  const argv = (...args: string[]) => ['node', 'dms', ...args];
  const split = (...args: string[]) => endRunOptions(buildProgram(), argv(...args)).slice(2);

  it('gives a flag after the command to the command', () => {
    expect(split('run', 'busybox', 'echo', '--name', 'x')).toEqual(['run', 'busybox', '--', 'echo', '--name', 'x']);
    expect(split('--home', '/h', 'run', '--cpu', '0.5', 'busybox', 'sh', '-c', 'echo hi')).toEqual(['--home', '/h', 'run', '--cpu', '0.5', 'busybox', '--', 'sh', '-c', 'echo hi']);
  });

  it("still reads run's options before the image and between it and the command", () => {
    expect(split('run', 'none', '--executor', 'null', '--cpu', '0.1')).toEqual(['run', 'none', '--executor', 'null', '--cpu', '0.1']);
    expect(split('run', 'none', '--executor', 'null', '-e', 'A=1', 'echo', '--env', 'x')).toEqual(['run', 'none', '--executor', 'null', '-e', 'A=1', '--', 'echo', '--env', 'x']);
    expect(split('run', '--memory=64MiB', 'busybox', 'echo')).toEqual(['run', '--memory=64MiB', 'busybox', '--', 'echo']);
  });

  it('leaves an explicit -- and every other command alone', () => {
    expect(split('run', 'busybox', '--', 'tool', '--name', 'x')).toEqual(['run', 'busybox', '--', 'tool', '--name', 'x']);
    expect(split('jobs', 'submit', 'spec.yaml', '--name', 'x')).toEqual(['jobs', 'submit', 'spec.yaml', '--name', 'x']);
  });
});
