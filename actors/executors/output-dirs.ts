/**
 * The directories a job's outputs are written to, made in its container before it starts. A
 * user of `dms run -o out:/outputs busybox sh -c 'echo hi > /outputs/x'` expects /outputs to be
 * there, as Bacalhau's result paths and Docker's `-v` are; an image rarely has it, and without it
 * the job failed `can't create '/outputs/x': No such file or directory` and its output was not
 * collected. An output's path names a directory unless its last name has an extension (a dot
 * past its first character: `/out/model.bin`), which names a file: then only the directory it
 * is in is made. A path the image has already is left as the image has it; one made here is
 * empty and writable by any user the image runs as (mode 0777), and the directories above it
 * that are missing are made as the engine makes them (root's, 0755).
 */
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { namesAFile, normalPath, type OutputSpec } from '../../behaviors/jobs/files.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { answered, type Engine, statusOf } from './engine.js';

/** The directory each output needs, as a container path; the root needs no making. */
export function outputDirs(outputs: readonly OutputSpec[]): string[] {
  const dirs = outputs.map(({ path }) => {
    const normal = normalPath(path);
    return namesAFile(normal) ? normal.slice(0, normal.lastIndexOf('/')) : normal;
  });
  return [...new Set(dirs.filter((dir) => dir !== ''))];
}

/**
 * Makes in `container` (created, not started) each output directory the image does not have,
 * one at a time, shallowest first: one that cannot be made (under a read-only input mount) is
 * logged, not the start's failure nor the others', since the job may make it itself, and an
 * output it does not write is reported missing as before.
 */
export async function makeOutputDirs(engine: Engine, container: Docker.Container, outputs: readonly OutputSpec[], log?: Logger): Promise<void> {
  for (const dir of outputDirs(outputs).sort()) {
    try {
      // A HEAD's answer has no body; read to its end, it gives its connection back.
      const head = await answered(engine, `looking for ${dir} in the container`, (abortSignal) => container.infoArchive({ path: dir, abortSignal }));
      (head as { resume?: () => void }).resume?.();
      continue;
    } catch (e) {
      if (statusOf(e) !== 404) {
        log?.warn({ path: dir, err: errorText(e) }, 'could not look for an output directory in the container');
        continue;
      }
    }
    try {
      const archive = await directoryTar(dir);
      await answered(engine, `making ${dir} in the container`, (abortSignal) => container.putArchive(archive, { path: '/', abortSignal }));
    } catch (e) {
      log?.warn({ path: dir, err: errorText(e) }, 'could not make an output directory in the container');
    }
  }
}

/** A tar of the one directory `dir`, empty and writable by all; the engine makes its missing parents itself. */
async function directoryTar(dir: string): Promise<Buffer> {
  const pack = tar.pack();
  pack.entry({ name: `${dir.slice(1)}/`, type: 'directory', mode: 0o777, mtime: new Date() });
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of pack) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
