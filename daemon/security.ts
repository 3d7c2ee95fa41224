import { DEPLOYMENT_CAPABILITY, DeploymentBehaviors } from '../behaviors/jobs/deployment.js';
import { ApiKeyStore } from '../http/apikeys.js';
import { apiKeysPath } from '../runtime/api-keys.js';
import { anchorsPath, ensureAnchors, watchAnchors } from '../runtime/capability/anchors.js';
import { Authority, installAuthority, ownKeys } from '../runtime/capability/authority.js';
import { type Config, isLoopback } from '../runtime/config.js';
import type { KeyPair } from '../runtime/crypto/keys.js';
import { DmsError, errorText } from '../runtime/errors.js';
import type { Logger } from '../runtime/log.js';
import type { ActorSystem } from '../runtime/system.js';
import { type Envelope, isBroadcast } from '../runtime/wire/envelope.js';

export interface SecurityOptions {
  system: ActorSystem;
  config: Config;
  home: string;
  operator: KeyPair;
  log: Logger;
}

/** What the composition root wires into the HTTP actor and the app, and closes on stop. */
export interface Security {
  authority: Authority;
  apiKeys?: ApiKeyStore;
  /** HttpActor `precheck`: 403 at once for what this node's actors would refuse. */
  precheck(env: Envelope): void;
  /** HttpActor `provide`: the operator's provide tokens for envelopes that leave the node. */
  provide(env: Envelope): Uint8Array | undefined;
  close(): void;
}

/**
 * Refuses a REST server anyone on the network could drive: bound to a non-loopback address
 * with neither API keys nor JWTs, every request would run as admin (jobs, device settings).
 * A warning was not enough; `rest.insecure: true` is the explicit way to accept that.
 */
export function checkExposure(config: Config): void {
  if (isLoopback(config.rest.addr) || config.auth.api_key_enabled || config.auth.jwt_secret || config.rest.insecure) return;
  throw new DmsError(
    'invalid',
    `REST is bound to the non-loopback address ${config.rest.addr} without credentials: turn on API keys (DMS_API_KEY_ENABLED=true) or JWT (DMS_JWT_SECRET), or set rest.insecure: true to accept the risk`,
  );
}

/** JWT secrets shorter than this can be brute-forced offline from any one token. */
const MIN_JWT_SECRET = 32;

/**
 * Capabilities and REST auth for one node: the authority from the home's anchors (re-read when
 * `dms cap` changes them) installed as the system's authorizer, the API keys, and the start-up
 * warnings about exposure. Secrets are never logged, only whether they are set.
 */
export function setUpSecurity(o: SecurityOptions): Security {
  const { system, config, log } = o;
  checkExposure(config);
  const path = anchorsPath(o.home);
  const caps = config.capabilities;
  const deployment = caps.open_deployment ? [DEPLOYMENT_CAPABILITY] : [];
  // Open whatever open_deployment says: closing it is about who may place jobs here, while this
  // is a provider asking about a job this node placed there (its answer is only for such nodes).
  // Closed, the providers of this node's jobs ran them on for good once its cancels were lost.
  const asked = [DeploymentBehaviors.wanted];
  const policy = { openTopics: [...caps.open_topics, ...deployment], openCapabilities: [...caps.open_capabilities, ...deployment, ...asked] };
  const authority = new Authority(ensureAnchors(path, o.operator.did), policy, ownKeys(system), {
    maxChainLinks: caps.max_chain_links,
    peerBadSignaturesPerS: caps.peer_bad_signatures_per_s,
    peerRefuseS: caps.peer_refuse_s,
  });
  // Counted, so that what tokens cost the node can be watched (and tested) without a clock.
  const verified = authority.cache.verified;
  system.metrics?.gauge('dms_capability_signature_checks', 'Capability token signatures verified since start (cache hits not counted), by result', ['result'], (set) => {
    set({ result: 'valid' }, verified.valid);
    set({ result: 'invalid' }, verified.invalid);
  });
  system.metrics?.gauge('dms_capability_refused_senders', 'Peers and keys refused now for sending tokens whose signatures do not verify', [], (set) => set({}, authority.refusedSenders()));
  const report = (problems: readonly string[]) => {
    for (const p of problems) log.warn({ anchors: path, problem: p }, 'require anchor grants nothing');
  };
  report(authority.problems);
  installAuthority(system, authority);
  const unwatch = watchAnchors(
    path,
    (a) => {
      report(authority.load(a));
      log.info({ anchors: path, roots: a.root.length, require: a.require.length, revoke: a.revoke.length }, 'trust anchors reloaded');
    },
    (e) => log.warn({ anchors: path, err: errorText(e) }, 'trust anchors unreadable; keeping the ones loaded before'),
  );

  let apiKeys: ApiKeyStore | undefined;
  if (config.auth.api_key_enabled) {
    apiKeys = new ApiKeyStore(apiKeysPath(o.home), log);
    apiKeys.watch();
  }

  const restAuth = Boolean(apiKeys || config.auth.jwt_secret);
  if (!isLoopback(config.rest.addr) && !restAuth) {
    // Only reached with rest.insecure: checkExposure refused the start otherwise.
    log.warn(
      { addr: config.rest.addr },
      'REST is bound to a non-loopback address without authentication (rest.insecure): anyone who can reach it can use the REST interface',
    );
  } else if (!isLoopback(config.rest.addr) && !config.tls.enabled) {
    log.warn({ addr: config.rest.addr }, 'REST is bound to a non-loopback address without TLS: credentials cross the network in clear text (set DMS_TLS_ENABLED)');
  }
  if (config.auth.jwt_secret && config.auth.jwt_secret.length < MIN_JWT_SECRET) {
    log.warn({ min_length: MIN_JWT_SECRET }, 'auth.jwt_secret is short: tokens signed with it can be forged after an offline search');
  }

  const operatorDid = o.operator.did;
  const close = () => {
    unwatch();
    apiKeys?.close();
  };
  const leaves = (env: Envelope) => isBroadcast(env) || !system.isHere(env.to.addr.host);
  return {
    authority,
    apiKeys,
    precheck: (env) => authority.precheck(system, env),
    provide: (env) => (leaves(env) ? authority.provideFor(operatorDid, env.be, env.opt.topic) : undefined),
    close,
  };
}
