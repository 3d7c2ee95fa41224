import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { defineActor } from '../runtime/component.js';
import { DmsError } from '../runtime/errors.js';
import { describeIssues } from '../runtime/issues.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Plugin, PluginShape } from '../behaviors/plugin.js';

const isPath = (spec: string) => spec.startsWith('.') || isAbsolute(spec);

/**
 * A plugin's actor, made like every other component. Its handlers run as many at once as the
 * node's default allows, like the core's own; a plugin whose handlers share state across
 * awaits asks for `concurrency: 1`.
 */
export const pluginActor = (plugin: Plugin) =>
  defineActor({
    inbox: plugin.name,
    topics: plugin.topics,
    concurrency: plugin.concurrency ?? 'node',
    create: () => ({ behaviors: plugin.behaviors }),
  });

/** Imports each plugin module and checks it; any failure stops start-up naming the plugin. */
export async function loadPlugins(system: ActorSystem, modules: string[], home: string): Promise<Plugin[]> {
  const loaded: Plugin[] = [];
  for (const spec of modules) {
    const target = isPath(spec) ? pathToFileURL(resolve(home, spec)).href : spec;
    let mod: { default?: unknown };
    try {
      mod = await import(target);
    } catch (e) {
      throw new DmsError('invalid', `plugins.modules: cannot load '${spec}' (${(e as Error).message})`);
    }
    const check = PluginShape.safeParse(mod.default);
    if (!check.success) throw new DmsError('invalid', `plugins.modules: '${spec}' is not a DMS plugin: ${describeIssues(check.error)}`);
    const plugin = mod.default as Plugin;
    if (system.inbox(plugin.name)) throw new DmsError('invalid', `plugins.modules: '${spec}' uses the name '${plugin.name}', already taken`);
    if (loaded.some((p) => p.name === plugin.name)) throw new DmsError('invalid', `plugins.modules: '${spec}' uses the name '${plugin.name}', already taken`);
    loaded.push(plugin);
  }
  return loaded;
}
