import * as z from 'zod';
import type { Behavior } from '../runtime/behavior.js';

/**
 * A plugin adds behaviors to a node without touching the core: the node spawns one actor per
 * plugin, with inbox = the plugin's name, holding its behaviors and topic subscriptions.
 * A plugin module's default export is a Plugin (see README "Plugins").
 */
export interface Plugin {
  /** Lower-case name; also the inbox of the plugin's actor. */
  name: string;
  behaviors: Behavior<any, any>[];
  /** Broadcast topics the plugin's actor subscribes to. */
  topics?: string[];
  /** Envelopes its actor handles at once; default the node's `actor.mailbox_concurrency`. */
  concurrency?: number;
}

export const definePlugin = (plugin: Plugin): Plugin => plugin;

/** The shape a loaded module must have; checked so a broken plugin fails start-up with a reason. */
export const PluginShape = z.object({
  name: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, { error: 'name must be lower-case letters, digits and dashes' }),
  behaviors: z
    .array(
      z.object({
        name: z.string().regex(/^\/\S+$/, { error: 'behavior name must be a /-separated path' }),
        handle: z.custom<Behavior['handle']>((v) => typeof v === 'function', { error: 'handle must be a function' }),
      }).loose(),
    )
    .min(1, { error: 'a plugin needs at least one behavior' }),
  topics: z.array(z.string().min(1)).optional(),
  concurrency: z.int().min(1).max(1024).optional(),
});
