import { vi } from 'vitest';
import type * as Keys from '../../runtime/crypto/keys.js';

/*
 * Every token signature check goes through verifySync of runtime/crypto/keys.ts, so counting its
 * calls counts them all: a test tells a cache hit from a verification by the count, where timing
 * them would depend on the machine's load. vi.mock must stay in the test file (vitest hoists it
 * above that file's imports), so a file counting them mocks keys.js with this module's factory:
 *
 *   vi.mock('../../runtime/crypto/keys.js', async (original) => (await import('../helpers/verifications.js')).countingVerifications(await original()));
 *
 * This module imports keys.js for its types alone: the factory runs while keys.js is being
 * imported, which a value import from here would wait on.
 */

const verify = vi.fn<typeof Keys.verifySync>();

/** keys.js with verifySync counted, for the factory of a test's vi.mock. */
export function countingVerifications(original: typeof Keys): typeof Keys {
  verify.mockImplementation(original.verifySync);
  return { ...original, verifySync: verify };
}

/** How many signatures were verified since the file started, or since the count was last cleared. */
export const verifications = (): number => verify.mock.calls.length;
