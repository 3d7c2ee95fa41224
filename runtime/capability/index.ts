/** Capability tokens, trust anchors and the authority that enforces them (docs/CAPABILITIES.md). */
export * from './anchors.js';
export * from './authority.js';
export * from './budget.js';
export * from './cache.js';
export * from './chain.js';
export * from './paths.js';
export * from './token.js';
