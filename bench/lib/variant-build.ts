import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Copies of this checkout's build with one thing taken out, as baselines that say what that
 * thing costs: everything else is the same build, byte for byte. Only for what nothing else can
 * take out: no node may run without it, so there is no switch in the node to measure it by
 * (what can be switched, such as dev mode's events, is measured by switching it). A copy sits beside dist/ (its
 * folder is in .gitignore), so it resolves node_modules and ../package.json as dist does.
 *
 * Each variant names what it replaces and how many places it must find: a build whose code no
 * longer looks as the variant expects would otherwise yield a copy identical to dist/, and the
 * comparison would prove nothing while looking fine. So a miss fails loudly instead
 * (test/unit/bench-variants.test.ts checks every variant against the current build).
 */
export interface VariantSpec {
  /** Folder beside dist/ that holds the copy. */
  dir: string;
  /** What the replaced places are, for the error message. */
  what: string;
  pattern: RegExp;
  replacement: string;
  /** The fewest places the pattern must replace. */
  min: number;
}

export interface Variant {
  /** The copy's `dms` entry point. */
  cli: string;
  /** How many places were replaced. */
  hits: number;
  remove(): void;
}

export function variantBuild(spec: VariantSpec): Variant {
  const dist = fileURLToPath(new URL('../../dist/', import.meta.url));
  const copy = fileURLToPath(new URL(`../../${spec.dir}/`, import.meta.url));
  rmSync(copy, { recursive: true, force: true });
  cpSync(dist, copy, { recursive: true });
  let hits = 0;
  for (const file of readdirSync(copy, { recursive: true, encoding: 'utf8' })) {
    if (!/\.c?js$/.test(file)) continue;
    const text = readFileSync(copy + file, 'utf8');
    const found = text.match(spec.pattern)?.length ?? 0;
    if (found === 0) continue;
    hits += found;
    writeFileSync(copy + file, text.replace(spec.pattern, spec.replacement));
  }
  const remove = () => rmSync(copy, { recursive: true, force: true });
  if (hits < spec.min) {
    remove();
    throw new Error(`found ${hits} ${spec.what} in dist/, expected at least ${spec.min}: update bench/lib/variant-build.ts`);
  }
  return { cli: `${copy}cli/main.js`, hits, remove };
}

/**
 * Envelope signatures taken as valid without the Ed25519 check: the floor of the message path
 * if verification were free. Only the node's own checks (in dist/lib/dms.cjs) are replaced:
 * libsodium's, inline (runtime/crypto/ed25519.ts) and on the verify thread (verify-thread.ts), and
 * node:crypto's sync and callback forms (the callback is called with true), so the signed bytes
 * are still built and every other check still runs; libp2p's own cryptography (Noise, gossipsub)
 * is untouched. A bench baseline only: no node may run this way.
 */
export const VERIFY_FREE: VariantSpec = {
  dir: 'dist-noverify',
  what: 'Ed25519 verify calls (libsodium and node:crypto: runtime/crypto/ed25519.ts, verify-thread.ts)',
  // The CommonJS bundle calls an import through its module object: `(0,import_node_crypto.verify)(`.
  // libp2p's patched @libp2p/crypto calls libsodium too; the node's own calls (ed25519.ts's, and
  // the verify thread's program, a string in verify-thread.ts) name the key's bytes `keyBytes`.
  // test/unit/bench-variants.test.ts checks there are four.
  pattern: /\(0,\s*import_node_crypto\d*\.verify\)\(|\bsodium\d*\.crypto_sign_verify_detached\((?=[^()]*\bkeyBytes\d*\))/g,
  replacement: "((...a) => (typeof a[4] === 'function' ? a[4](null, true) : true))(",
  min: 4,
};
