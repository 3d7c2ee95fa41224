/**
 * Sizes as people write and read them, for the CLI and other clients. The reader and the
 * writer live in runtime/bytes.ts, since the node reads the same strings in job specs and
 * writes the same units in its messages.
 */
export { formatBytes, parseSize, SizeError } from '../runtime/bytes.js';
