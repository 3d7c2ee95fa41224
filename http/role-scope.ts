/**
 * What the node signs on a REST caller's behalf. An unsigned envelope is signed as the
 * operator, a root of this node (and maybe of others), so whatever it asks for is granted:
 * without a bound, the `operator` REST role would reach admin-only behaviors (device config,
 * allocations) through /api/v1/actor/invoke. `rest.roles` gives each role the capability paths
 * the node may sign for; this checks an envelope against them before it is signed.
 */
import { capabilityOf } from '../runtime/capability/authority.js';
import { anyImplies } from '../runtime/capability/paths.js';
import { DmsError } from '../runtime/errors.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Envelope, isBroadcast } from '../runtime/wire/envelope.js';
import type { Role } from '../runtime/api-keys.js';

export type RolePaths = Readonly<Record<Role, readonly string[]>>;

const forbidden = (role: Role, what: string) =>
  new DmsError('forbidden', `role ${role} may not have the node sign ${what} (rest.roles.${role}); sign the envelope with a key that holds it`);

/**
 * The capability an envelope uses: for a behavior of this node, its declared capability (else
 * its name); for another node's, its name, the default every node applies.
 */
function capabilityUsed(system: ActorSystem, env: Envelope): string {
  const local = !isBroadcast(env) && system.isHere(env.to.addr.host);
  const behavior = local ? system.inbox(env.to.addr.inbox)?.behaviors.get(env.be) : undefined;
  return behavior ? capabilityOf(behavior) : env.be;
}

/**
 * Throws `forbidden` (403, naming the role and the capability) unless `role` may have the node
 * sign `env`. A broadcast needs its behavior and its topic; the open topics
 * (`capabilities.open_topics`) count as every role's, since anyone may publish there anyway.
 */
export function checkRoleScope(system: ActorSystem, roles: RolePaths, openTopics: readonly string[], role: Role, env: Envelope): void {
  const paths = roles[role];
  const need = capabilityUsed(system, env);
  if (need !== '' && !anyImplies(paths, need)) throw forbidden(role, `for capability ${need}`);
  if (!isBroadcast(env)) return;
  const topic = env.opt.topic ?? '';
  if (!anyImplies(paths, topic) && !anyImplies(openTopics, topic)) throw forbidden(role, `a broadcast on topic ${topic}`);
}
