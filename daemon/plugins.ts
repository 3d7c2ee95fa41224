import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DmsError } from '../runtime/errors.js';
import { describeIssues } from '../runtime/issues.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Plugin, PluginShape } from '../behaviors/plugin.js';

const isPath = (spec: string) => spec.startsWith('.') || isAbsolute(spec);

/** Imports each plugin module and spawns its actor; any failure stops start-up naming the plugin. */
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
    system.spawn({ inbox: plugin.name, behaviors: plugin.behaviors, topics: plugin.topics });
    loaded.push(plugin);
  }
  return loaded;
}
