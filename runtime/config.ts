import * as z from 'zod';
import { isPath } from './capability/paths.js';
import { DmsError } from './errors.js';
import { describeIssues } from './issues.js';

const port = z.number().int().min(0).max(65535);
const positiveInt = z.number().int().positive();
const capabilityPath = z.string().refine(isPath, { error: 'must be a path like /dms/job (leading /, no empty segments)' });

/**
 * The whole configuration. Every key has its default here; `dms_config.json` at the
 * repository root is this object written out (a test keeps the two equal).
 */
/** The longest node name a profile holds (behaviors/discovery.ts), `general.name` and the device settings' alike. */
export const MAX_NODE_NAME = 200;

export const ConfigSchema = z
  .object({
    general: z
      .object({
        /** Dev mode (`dms start --dev`): `/config` shows the (redacted) config, the dev stream and page are on. */
        debug: z.boolean().default(false),
        /** The dev stream shows payloads decoded as JSON (`--dev-payloads`); they may hold secrets. */
        dev_payloads: z.boolean().default(false),
        /**
         * Time each stage of the envelope path (runtime/stage-timings.ts), read at
         * `GET /api/v1/dev/stages`: for finding where a message's time goes. Off, nothing subscribes to the `dms:stage` channel and each stage costs one check.
         */
        stage_timings: z.boolean().default(false),
        log_level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
        /**
         * Device name shown in device status and in the profile peers keep; empty means the
         * machine's hostname. Peers refuse a profile whose name is longer (behaviors/discovery.ts),
         * which left a node with a longer one unknown to them: never offered a job.
         */
        name: z.string().max(MAX_NODE_NAME, `at most ${MAX_NODE_NAME} characters: peers refuse a profile with a longer name`).default(''),
      })
      .strict()
      .prefault({}),
    rest: z
      .object({
        addr: z.string().min(1).default('127.0.0.1'),
        port: port.default(9999),
        /** Accept envelopes without `sig` and sign them as the operator; null = only while bound to loopback. */
        allow_unsigned: z.boolean().nullable().default(null),
        /** Largest request body in bytes (413 above it). */
        body_limit: positiveInt.default(1_048_576),
        /** A request body that sends nothing for this long is cut: a stalled upload holds storage it claimed. */
        body_idle_timeout_s: positiveInt.max(3600).default(30),
        /** How long an event stream (a job followed, the dev stream) may say nothing before it writes a keep-alive comment (http/sse.ts). */
        sse_keepalive_s: positiveInt.max(300).default(15),
        /** Connections the REST server holds at once, so the node keeps file descriptors for its own work; past it the slowest waiting on its client goes (http/connection-slots.ts). */
        max_connections: positiveInt.max(65_536).default(1024),
        /** REST invokes and broadcasts waiting for replies at once (503 above it). */
        max_pending: positiveInt.default(10_000),
        /** Most replies one broadcast collects. */
        max_broadcast_replies: positiveInt.default(1_000),
        /**
         * Most replies one broadcast takes from one host (a node may answer with several actors);
         * its others are dropped, counting against no bound, so a peer answering many times at
         * once cannot fill the broadcast before the other nodes' replies come.
         */
        max_broadcast_replies_per_host: positiveInt.default(8),
        /** Invokes and broadcasts one REST client may have waiting at once (429 above it). */
        max_pending_per_client: positiveInt.default(256),
        /** Bytes of replies one broadcast collects; collection stops there. */
        max_broadcast_bytes: positiveInt.default(8 * 1024 * 1024),
        /** Bytes of replies one REST client's waiting requests may hold at once. */
        max_pending_bytes_per_client: positiveInt.default(64 * 1024 * 1024),
        /**
         * Followers of job output (`logs?follow=true`) open at once on this node (503 with
         * Retry-After above it): each holds a page of output in its connection's buffer and a
         * poll at the orchestrator for as long as it stays open, however slowly it reads.
         */
        max_log_followers: positiveInt.default(64),
        /** Followers of one job's output open at once (503 with Retry-After above it): one job's readers cannot take every slot. */
        max_log_followers_per_job: positiveInt.default(8),
        /**
         * Host names (the `Host` header, without port) this node answers besides loopback
         * addresses, `localhost` and `rest.addr`: a browser page that rebinds its own DNS name
         * to this node is refused (403).
         */
        allowed_hosts: z.array(z.string().min(1)).default([]),
        /** Serve a non-loopback `rest.addr` without API keys or JWTs, accepting that anyone who reaches it can use it. */
        insecure: z.boolean().default(false),
        /**
         * What the node signs on a REST caller's behalf (unsigned envelopes), by the caller's
         * role: the capability paths each role may use that way.
         */
        roles: z
          .object({
            admin: z.array(capabilityPath).default(['/']),
            operator: z.array(capabilityPath).default(['/public', '/broadcast', '/dms/job', '/dms/ensemble', '/dms/node/peers']),
            viewer: z
              .array(capabilityPath)
              .default([
                '/public',
                '/dms/job/status',
                '/dms/job/list',
                '/dms/job/logs',
                '/dms/job/events',
                '/dms/ensemble/status',
                '/dms/ensemble/list',
                '/dms/resources/usage',
                '/dms/allocations/list',
                '/dms/device/status',
                '/dms/node/peers/list',
                '/dms/node/peers/self',
              ]),
          })
          .strict()
          .prefault({}),
        /** Requests per client to /api/v1/actor/* (token bucket; 429 with Retry-After above it). */
        rate_limit: z
          .object({
            /** Sustained requests per second; 0 turns the limit off. */
            per_second: z.number().nonnegative().default(100),
            /** Requests allowed in a burst above the sustained rate. */
            burst: positiveInt.default(200),
            /** Limit loopback clients too (off: the local operator is not throttled). */
            loopback: z.boolean().default(false),
          })
          .strict()
          .prefault({}),
        /**
         * Web pages on other origins. None by default: a page the operator visits could otherwise
         * drive the node (submit jobs, run containers). A listed origin is matched exactly and
         * is served only with an API key or JWT (http/guard.ts); the node's own pages are
         * same-origin and need no entry.
         */
        cors: z
          .object({
            origins: z.array(z.string()).default([]),
            methods: z.array(z.string()).default(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']),
            /** X-API-Key and Authorization: a listed origin must send credentials, so its preflight must allow them. */
            headers: z.array(z.string()).default(['Access-Control-Allow-Origin', 'Origin', 'Content-Length', 'Content-Type', 'X-API-Key', 'Authorization']),
            credentials: z.boolean().default(false),
            max_age: z.number().int().nonnegative().default(43_200),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    tls: z
      .object({
        enabled: z.boolean().default(false),
        cert_file: z.string().default(''),
        key_file: z.string().default(''),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({
        api_key_enabled: z.boolean().default(false),
        jwt_secret: z.string().default(''),
        /** Longest lifetime (`exp` − `iat`, or `exp` − now without `iat`) a bearer JWT may have, in seconds. */
        jwt_max_lifetime_s: positiveInt.default(86_400),
        /** When set, a bearer JWT must carry this `iss`. */
        jwt_issuer: z.string().default(''),
        /** When set, a bearer JWT must carry this `aud`. */
        jwt_audience: z.string().default(''),
      })
      .strict()
      .prefault({}),
    /** Capability policy (docs/CAPABILITIES.md); trust anchors live in <home>/anchors.json. */
    capabilities: z
      .object({
        /** Broadcast topics anyone may publish on to this node's /broadcast/* behaviors. */
        open_topics: z.array(capabilityPath).default(['/dms/hello']),
        /** Capabilities anyone may use without a token (/public is always open). */
        open_capabilities: z.array(capabilityPath).default([]),
        /**
         * Any node of the network may place jobs here (bid, reserve, start: the /dms/deployment
         * capability and topic). false: only holders of a /dms/deployment grant.
         */
        open_deployment: z.boolean().default(true),
        /**
         * Longest token chain accepted (root grant plus delegations). A stranger picks the chain
         * and each link is a signature to check; real delegation trees are shallow. At most 16,
         * the most a token may hold at all.
         */
        max_chain_links: z.number().int().min(1).max(16).default(4),
        /**
         * Token signatures that fail a sender (a network peer, else a signing key) may make the
         * node check per second before it is refused: a forgery costs its sender nothing and the
         * node a verification, and a genuine sender sends none.
         */
        peer_bad_signatures_per_s: positiveInt.default(10),
        /** How long such a sender is refused, seconds. */
        peer_refuse_s: positiveInt.default(60),
      })
      .strict()
      .prefault({}),
    network: z
      .object({
        /** Run the libp2p host. Off, the node serves only local actors. */
        enabled: z.boolean().default(true),
        ListenAddresses: z.array(z.string()).default(['/ip4/0.0.0.0/tcp/9000']),
        BootstrapPeers: z.array(z.string()).default([]),
        ProtocolID: z.string().min(1).default('/dms/kad/1.0.0'),
        EnableMDNS: z.boolean().default(false),
        /** Largest envelope sent or accepted over the network, in bytes. */
        MaxEnvelopeBytes: positiveInt.default(1_048_576),
        /** libp2p connections held at once; past it, shared between the addresses that dial (inbound-share.ts). */
        MaxConnections: z.number().int().min(8).max(100_000).default(300),
        /**
         * DHT messages one peer may send this node a second, five seconds' worth at once: each
         * costs the node's one event loop ~0.2 ms, so a peer sending them as fast as it could
         * slowed every other answer. A stream past it is reset (network/service-streams.ts).
         */
        DHTMessagesPerSecond: positiveInt.max(1_000_000).default(200),
        /** The same over every identity dialling from one host (an IPv4 address, an IPv6 /64). */
        DHTMessagesPerSecondPerHost: positiveInt.max(1_000_000).default(500),
      })
      .strict()
      .prefault({}),
    db: z
      .object({
        type: z.enum(['sqlite']).default('sqlite'),
        /** SQLite file; empty means `dms.sqlite` in the node's home. */
        path: z.string().default(''),
      })
      .strict()
      .prefault({}),
    plugins: z
      .object({
        /** Plugin modules to load at start: paths (relative to the node home) or package names. */
        modules: z.array(z.string().min(1)).default([]),
        /** Each plugin's own settings, by plugin name: what its context's `config` holds. */
        config: z.record(z.string(), z.record(z.string(), z.unknown())).default({}),
        /** Seconds one plugin's import, and then its start hook, may take before start-up gives up on it. */
        load_timeout_s: positiveInt.max(600).default(20),
      })
      .strict()
      .prefault({}),
    actor: z
      .object({
        mailbox_capacity: positiveInt.default(4096),
        mailbox_concurrency: positiveInt.default(64),
        replay_capacity: positiveInt.default(1_000_000),
        /** Most unexpired (from.id, nonce) entries one sender may hold in the replay cache. */
        replay_per_sender: positiveInt.default(50_000),
        /**
         * Most unexpired replay-cache entries one libp2p peer (the connection's authenticated peer
         * id; on gossip the signed publisher) or one REST client signing with its own keys may
         * hold, whatever from.id its envelopes carry: throwaway keys cannot fill the cache.
         */
        replay_per_peer: positiveInt.default(50_000),
        /**
         * Most unexpired replay-cache entries the envelopes this node signs as the operator for
         * unsigned REST callers may hold together (never more than half the reserve, a twentieth
         * of replay_capacity): they cannot lock out the operator's own signed calls or the peers.
         */
        replay_rest_quota: positiveInt.default(50_000),
        /** How far ahead `opt.exp` may be, in seconds (400 naming opt.exp beyond it). */
        max_ttl_s: positiveInt.default(900),
      })
      .strict()
      .prefault({}),
    jobs: z
      .object({
        /** Seconds a cancelled or timed-out container gets to exit on SIGTERM before it is killed. */
        stop_grace_s: z.number().int().nonnegative().default(10),
        /**
         * How long a memory-limited container that died by SIGKILL is watched for the engine's
         * sign of the OOM killer (its `oom` event, State.OOMKilled), which can come after the
         * exit. Long enough for a loaded engine; tests that kill containers set it short.
         */
        oom_settle_ms: z.number().int().min(50).max(60_000).default(10_000),
        /** Jobs not yet ended past which a submission is refused (503): each is held in memory until it ends (actors/orchestrator/unfinished.ts). */
        max_unfinished: positiveInt.max(10_000_000).default(10_000),
        /** Bytes of commands, environments and secrets of jobs not yet ended past which a submission is refused (503). */
        max_unfinished_bytes: positiveInt.default(256 * 1024 * 1024),
        /** How often a running Docker job's writes into its container and into the volumes it mounts writable are measured against what it may write. */
        storage_check_ms: z.number().int().min(100).max(3_600_000).default(5_000),
        /** What a job gets when its spec asks for zero cores or zero memory (a limit always applies). */
        default_resources: z
          .object({
            // At least what a job may ask for itself (RESOURCE_FLOOR): below, the engine refuses the container.
            // At most a job's own bound (behaviors/jobs/schema.ts MAX_CORES): past it the engine's nanocores overflow.
            cores: z.number().min(0.01).max(1_000_000).default(1),
            memory_bytes: positiveInt.min(6 * 1024 * 1024).default(512 * 1024 * 1024),
            /** What a Docker job that reserves no storage may write into its container; not held from the share (actors/executors/storage-watch.ts). */
            storage_bytes: positiveInt.default(1024 * 1024 * 1024),
          })
          .strict()
          .prefault({}),
        /** Most processes a Docker job may run at once (PidsLimit). */
        pids_limit: positiveInt.default(1024),
        /** Output kept per job, in bytes; the log is cut there and the cut is marked. */
        max_log_bytes: positiveInt.default(64 * 1024 * 1024),
        /**
         * Bytes the images this node pulled for jobs may hold together: past it, those used longest
         * ago that no container uses are removed, and a job whose image cannot fit fails
         * (actors/executors/image-cache.ts). Images the engine already had are not counted.
         */
        max_images_bytes: positiveInt.min(1024 * 1024).default(20 * 1024 * 1024 * 1024),
        /** Registry hosts (host[:port]) on loopback, link-local or private ranges that images may come from. */
        allowed_registries: z.array(z.string().min(1)).default([]),
        /**
         * Whether jobs placed here by other nodes get a network. Off, their containers have only
         * loopback: a stranger's code must not reach this machine's LAN or cloud metadata.
         */
        allow_network: z.boolean().default(false),
        /** The user every job's container runs as ("uid[:gid]" or a name the image has); empty: the image's own. */
        container_user: z
          .string()
          .regex(/^([A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?)?$/, 'a user and optional group: "65534:65534" or names the image has')
          .default(''),
        /** Whether job containers get a read-only root filesystem (and a small writable /tmp). Off: images that write outside /tmp keep working. */
        read_only_root: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    /** What this node grants other nodes that place jobs here (README "Who may deploy here"). */
    deployment: z
      .object({
        /**
         * How long a reservation is held for the start that should follow at once: asked for as a
         * requester, and granted at most as a provider. It is never renewed.
         */
        lease_ms: z.number().int().min(100).max(60_000).default(10_000),
        /**
         * Part of the onboarded share one requester's unstarted reservations may hold together
         * beyond its first: a single lease may be as large as the job, more leases stay within this.
         */
        lease_share: z.number().gt(0).max(1).default(0.25),
        /** Unstarted reservations one requester may hold here at once. */
        max_unstarted_leases: positiveInt.max(4096).default(64),
        /**
         * First wait before a job no node could take is offered again; each fruitless offer
         * doubles it up to max_offer_backoff_ms, so a full network is not flooded with offers.
         */
        offer_retry_ms: z.number().int().min(50).max(60_000).default(1_000),
        /** Longest wait between two offers: a node that appears or grows its share gets the job within this. */
        max_offer_backoff_ms: z.number().int().min(50).max(600_000).default(8_000),
        /**
         * A requester connected to at most this many peers asks each of them for bids directly
         * (one signed envelope each) instead of publishing the offer on the deployment topic: no
         * gossip hop between an offer and its bids. 0: always the topic.
         */
        direct_bid_peers: z.number().int().min(0).max(256).default(16),
        /**
         * Longest a requester collects bids after an offer, and waits for late ones once every
         * bidder so far refused or declined: a quiet network answers within a few ms and the
         * window closes at twice the first remote answer's delay, but a node farther away than
         * half this (a WAN, a loaded machine) is never heard.
         */
        bid_window_ms: z.number().int().min(50).max(10_000).default(500),
        /**
         * How long the node that placed a job waits for the node running it to answer before the
         * run counts as lost and the job is placed again. A few polls long, so one slow answer
         * does not lose a run.
         */
        lost_after_ms: z.number().int().min(100).max(600_000).default(10_000),
        /** How long the running node holds each poll for a job's output open when there is no news. */
        follow_poll_ms: z.number().int().min(50).max(60_000).default(5_000),
        /**
         * A job run here for another node that its requester has not polled for this long is
         * asked about of the requester (and stopped when no longer wanted there); asked again
         * every as long while it goes unfollowed and unanswered. Far above a follower's polls.
         */
        unfollowed_ask_ms: z.number().int().min(1_000).max(86_400_000).default(300_000),
      })
      .strict()
      .prefault({}),
    /** How this node, as a requester, judges the providers it places jobs on (README "Placing jobs on other nodes"). */
    placement: z
      .object({
        /**
         * Which providers get a job's `secrets`: `anchored`, only nodes whose DID is one of this
         * node's root anchors; `any`, every node. A bidder's word proves nothing about who runs
         * it, so the default sends secrets only where the operator said to.
         */
        trust: z.enum(['anchored', 'any']).default('anchored'),
        /**
         * How long a provider may go on reporting a cancelled job as running before it is taken
         * to have ignored the cancel: the job fails and the node is not placed on for a while.
         * Longer than the providers' stop grace (`jobs.stop_grace_s`), which a genuine stop takes.
         */
        cancel_bound_ms: z.number().int().min(100).max(600_000).default(30_000),
      })
      .strict()
      .prefault({}),
    /** Content-addressed job files: uploads, outputs, and the blocks moved between nodes (README "Job outputs"). */
    blocks: z
      .object({
        /** Largest upload (POST /api/v1/blobs, dms put, dms run -i), in bytes of file content: an upload is written to disk as it streams in. */
        max_upload_bytes: positiveInt.default(1024 * 1024 * 1024),
        /** Largest output one job may leave, in bytes of file content: a job's output is a stranger's and fills this node's disk. Larger ones carry an error instead of a CID. */
        max_output_bytes: positiveInt.default(1024 * 1024 * 1024),
        /**
         * Most one job's inputs may hold, in bytes of distinct blocks fetched and of file content
         * written out: a requester names the DAG, and a few blocks whose links repeat make a file
         * of any size. A job past it fails naming it.
         */
        max_input_bytes: positiveInt.default(1024 * 1024 * 1024),
        /** Blocks in flight from one node (at most 256), in 4 exchanges at once: enough to fill the link, bounded so a fetch holds at most this many blocks (256 KiB each) at once. */
        fetch_in_flight: z.number().int().min(1).max(256).default(256),
        /**
         * How long an exchange of a fetch may bring no block (nor "not here") before its holder is
         * given up for the next one and asked last for a while: a holder answering each exchange
         * just within its minute held a fetch for ever while another node had the blocks. An
         * exchange served here whose asker takes nothing for as long is ended, its room given back.
         */
        exchange_stall_ms: z.number().int().min(1_000).max(60_000).default(10_000),
        /**
         * Bytes of blocks this node holds for the fetches it serves, read from disk or sent and not
         * yet taken by the asker, over all of them: askers that never read held up to 64 MiB per
         * connection, for any number of connections. At least two blocks (2 MiB).
         */
        serve_buffer_bytes: z.number().int().min(2 * 1024 * 1024).default(64 * 1024 * 1024),
        /** Bytes of blocks held before unpinned ones no recent result needs are deleted, oldest first; 0: no bound. The node's disk is the operator's. */
        max_blocks_bytes: z.number().int().nonnegative().default(0),
        /** How long the outputs named by a job's result manifest are kept whatever the bound: a requester has this long to fetch them. */
        result_ttl_s: positiveInt.default(7 * 24 * 3600),
      })
      .strict()
      .prefault({}),
    /** Tunnels to jobs' declared ports (README "Ports and tunnels"): each holds a stream, a socket and buffers, so all are bounded. */
    tunnel: z
      .object({
        /** Tunnels one peer may hold open here at once: past it, its streams are refused, so one requester cannot starve the others. */
        max_streams_per_peer: z.number().int().min(1).max(1024).default(16),
        /** Tunnels open here in all, whoever opened them. */
        max_streams: z.number().int().min(1).max(65_536).default(256),
        /** A tunnel with no byte either way for this long is closed, so abandoned connections free their slot. */
        idle_timeout_ms: z.number().int().min(1_000).max(86_400_000).default(300_000),
        /** Local listeners `dms jobs port-forward` may hold open on this node at once (each is a port bound on the host). */
        max_forwards: z.number().int().min(1).max(256).default(32),
        /**
         * Whether a forward may listen on an address other than loopback (`0.0.0.0`, a LAN
         * address): anyone who reaches it there connects to the job's port, with no credentials.
         */
        forward_any_address: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    ensembles: z
      .object({
        /** Ensembles this node drives at once (submitted here, not yet ended): each is a machine, its parts' jobs and a grant renewed on every host. */
        max_live: z.number().int().min(1).max(4096).default(256),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type Config = z.infer<typeof ConfigSchema>;

/** Keys whose values never leave the node: redacted in `/config`, logs and `dms config`. */
export const SECRET_KEYS = ['auth.jwt_secret'] as const;

export const defaultConfig = (): Config => ConfigSchema.parse({});

/** The environment variables a node reads, and the config key each one sets. */
export const ENV_KEYS: Record<string, string> = {
  DMS_HOST: 'rest.addr',
  DMS_PORT: 'rest.port',
  DMS_TLS_ENABLED: 'tls.enabled',
  DMS_TLS_CERT_FILE: 'tls.cert_file',
  DMS_TLS_KEY_FILE: 'tls.key_file',
  DMS_DB_TYPE: 'db.type',
  DMS_DB_PATH: 'db.path',
  DMS_NETWORK_LISTEN_ADDRESSES: 'network.ListenAddresses',
  DMS_NETWORK_BOOTSTRAP_PEERS: 'network.BootstrapPeers',
  DMS_JWT_SECRET: 'auth.jwt_secret',
  DMS_API_KEY_ENABLED: 'auth.api_key_enabled',
  DMS_DEBUG: 'general.debug',
  DMS_STAGE_TIMINGS: 'general.stage_timings',
};

export const CONFIG_FILE = 'dms_config.json';

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

export const configError = (source: string, message: string) => new DmsError('invalid', `${source}: ${message}`);

/** The schema of one dotted key (`rest.port`), or undefined when there is no such key. */
export function schemaAt(key: string): z.ZodType | undefined {
  let node: z.ZodType = ConfigSchema;
  for (const part of key.split('.')) {
    const inner = unwrap(node);
    if (!(inner instanceof z.ZodObject)) return undefined;
    const shape = inner.shape as Record<string, z.ZodType>;
    if (!(part in shape)) return undefined;
    node = shape[part];
  }
  return node;
}

function unwrap(s: z.ZodType): z.ZodType {
  let cur: any = s;
  while (cur instanceof z.ZodDefault || cur instanceof z.ZodPrefault || cur instanceof z.ZodOptional || cur instanceof z.ZodNullable) {
    cur = cur.def.innerType;
  }
  return cur;
}

/**
 * Turns a text value (environment, command line) into the JSON type the key takes:
 * booleans accept true/false/1/0, lists are comma-separated, numbers must be numbers.
 */
export function coerceText(key: string, text: string, source = key): Json {
  const schema = schemaAt(key);
  if (!schema) throw configError(source, 'no such configuration key');
  const inner = unwrap(schema);
  if (inner instanceof z.ZodBoolean) {
    const t = text.trim().toLowerCase();
    if (['true', '1', 'yes', 'on'].includes(t)) return true;
    if (['false', '0', 'no', 'off', ''].includes(t)) return false;
    throw configError(source, `'${text}' is not a boolean (true or false)`);
  }
  if (inner instanceof z.ZodNumber) {
    if (!/^-?\d+(\.\d+)?$/.test(text.trim())) throw configError(source, `'${text}' is not a number`);
    return Number(text);
  }
  if (inner instanceof z.ZodArray) {
    const t = text.trim();
    if (t.startsWith('[')) {
      try {
        return JSON.parse(t) as Json;
      } catch {
        throw configError(source, `'${text}' is not a JSON array`);
      }
    }
    return t === '' ? [] : t.split(',').map((s) => s.trim()).filter(Boolean);
  }
  if (inner instanceof z.ZodNull || (schema instanceof z.ZodDefault && text === 'null')) return null;
  return text;
}

export function getKey(obj: unknown, key: string): unknown {
  let cur: any = obj;
  for (const part of key.split('.')) {
    if (cur === null || typeof cur !== 'object' || !(part in cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

export function setKey(obj: JsonObject, key: string, value: Json): void {
  const parts = key.split('.');
  let cur: JsonObject = obj;
  for (const part of parts.slice(0, -1)) {
    const next = cur[part];
    if (next === null || typeof next !== 'object' || Array.isArray(next)) cur[part] = {};
    cur = cur[part] as JsonObject;
  }
  cur[parts[parts.length - 1]] = value;
}

/** A deep copy with every secret that is set replaced by "[redacted]". */
export function redact(config: Config): Config {
  const copy = structuredClone(config) as unknown as JsonObject;
  for (const key of SECRET_KEYS) if (getKey(copy, key)) setKey(copy, key, '[redacted]');
  // Plugins keep what they like in their sections, credentials included: only the names show.
  const plugins = (copy.plugins as JsonObject | undefined)?.config as JsonObject | undefined;
  if (plugins) for (const name of Object.keys(plugins)) plugins[name] = '[redacted]';
  return copy as unknown as Config;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/i;
export const isLoopback = (addr: string): boolean => LOOPBACK.test(addr);

/** Unsigned REST envelopes: as configured, else only while REST listens on loopback. */
export const allowsUnsigned = (config: Config): boolean => config.rest.allow_unsigned ?? isLoopback(config.rest.addr);
