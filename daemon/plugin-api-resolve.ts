/**
 * Module resolution hooks, registered (node:module `register`) before the node imports its
 * plugins: `dms/plugin` resolves to the plugin API of the node doing the loading. A plugin then
 * loads from any folder, with no `dms` installed or linked beside it, and always gets the same
 * module (definePlugin, zod) the node checks it with, never a second copy of another version.
 * Every other specifier resolves as Node resolves it.
 */
import type { InitializeHook, ResolveHook } from 'node:module';

let api: string | undefined;

export const initialize: InitializeHook<{ api: string }> = (data) => {
  api = data.api;
};

export const resolve: ResolveHook = (specifier, context, nextResolve) =>
  specifier === 'dms/plugin' && api ? { url: api, shortCircuit: true, format: 'module' } : nextResolve(specifier, context);
