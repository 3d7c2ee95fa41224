/**
 * MikroORM configures itself from the process too: MIKRO_ORM_* variables override the options it
 * is given, a `.env` in the working directory is read into them, and the @mikro-orm packages that
 * the working directory's package.json lists must carry its own version. A node started inside
 * someone else's project would take that project's database name (its jobs, secrets included,
 * written to a file the node never made owner-only), its debug switch (every statement logged
 * with its parameters), its driver module (code from that directory, run in the node), or refuse
 * to start. The node's storage is configured by DMS alone (its config, DMS_* variables, flags), so
 * MikroORM starts with none of that in view.
 */
import { devNull } from 'node:os';
import { MikroORM, type Options } from '@mikro-orm/sqlite';

/** What MikroORM sees of the environment while it starts: no `.env`, and no version check. */
const OWN_ENVIRONMENT: Record<string, string> = {
  // The `.env` read is this file, which is empty.
  MIKRO_ORM_ENV: devNull,
  // Its packages are one build (the bundle) or this repository's exact pins: nothing to compare,
  // and what it would compare is resolved from the working directory.
  MIKRO_ORM_ALLOW_VERSION_MISMATCH: '1',
};

// process.env is the process's: nodes started at once in one process (tests) share the one
// window in which it holds OWN_ENVIRONMENT, and the last to finish puts back what was there.
let starting = 0;
let outside: [string, string | undefined][] = [];

/** MikroORM.init with `options` and nothing from the environment. */
export async function initOrm(options: Options): Promise<MikroORM> {
  if (starting++ === 0) {
    const ormKeys = Object.keys(process.env).filter((k) => k.startsWith('MIKRO_ORM_'));
    outside = [...new Set([...ormKeys, ...Object.keys(OWN_ENVIRONMENT)])].map((k) => [k, process.env[k]]);
    for (const k of ormKeys) delete process.env[k];
    Object.assign(process.env, OWN_ENVIRONMENT);
  }
  try {
    return await MikroORM.init(options);
  } finally {
    if (--starting === 0) {
      for (const [k, v] of outside) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      outside = [];
    }
  }
}
