/** The DMS client library: talk to a node's REST actor interface with signed envelopes. */
export {
  DmsClient,
  DEFAULT_BROADCAST_TTL_MS,
  DEFAULT_TIMEOUT_MS,
  type BroadcastOptions,
  type CallOptions,
  type DiscoveredNode,
  type DmsClientOptions,
  type EnvelopeOptions,
  type InvokeOptions,
  type Payload,
  type Reply,
} from './client.js';
export { ClientError, decodeErrorReply, isClientError, type ClientErrorInit, type ClientErrorKind } from './errors.js';
export { RestClient, type RequestOptions, type RestClientOptions, type ServerEvent } from './rest.js';
export { isHandle, resolveTarget, ROOT_INBOX, type Target } from './target.js';
export type { Envelope, Handle } from '../runtime/wire/envelope.js';
export { KeyPair } from '../runtime/crypto/keys.js';
