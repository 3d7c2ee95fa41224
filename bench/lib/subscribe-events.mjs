// Preloaded into a node process (`node --import`): a subscriber of the kernel's `dms:event`
// channel that drops every event, so the node builds and publishes each one as it would for a
// watcher, and nothing else (no stream, no JSON, no socket). bench:invoke's part (g);
// test/unit/dev-events.test.ts checks it reaches the kernel's channel.
import { subscribe } from 'node:diagnostics_channel';

export const drop = () => {};
subscribe('dms:event', drop);
