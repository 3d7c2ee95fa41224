import * as z from 'zod';
import { encodeEnvelope } from '../../runtime/wire/envelope.js';
import { EnvelopeJson, HandleJson } from '../../runtime/wire/envelope-json.js';
import { onClientGone, readBodyText } from '../body.js';
import { restCaller } from '../caller.js';
import { JsonBody } from '../errors.js';
import { wholeNumberParam } from '../query.js';
import type { ResponseDoc } from '../route-table.js';
import type { RouteModule } from './types.js';

const Sent = z.object({ message: z.literal('message sent') });

const BroadcastQuery = z.object({
  limit: wholeNumberParam({
    pattern: /^[1-9][0-9]{0,8}$/,
    min: 1,
    max: 999_999_999,
    message: (raw) => `limit must be a positive integer, got '${raw}'`,
    description:
      'answer once this many replies arrived (at most rest.max_broadcast_replies are collected in any case); one host\'s replies count up to half of it ' +
      '(at least one) and rest.max_broadcast_replies_per_host, its others are dropped',
  }).optional(),
});

/**
 * The envelope routes' body: read as text and parsed losslessly by the HTTP actor (parseEnvelope),
 * which EnvelopeJson describes; test/unit/envelope-json.test.ts keeps the two in step.
 */
const envelope = { schema: EnvelopeJson, what: 'envelope' };

/** What every envelope route may answer besides its success (README "REST interface"). */
const ENVELOPE_ANSWERS: Record<number, ResponseDoc> = {
  400: {
    description:
      'an invalid envelope: malformed JSON, an object with a key twice, a missing or mistyped field, bad base64, a bad signature, from.did not matching from.id, ' +
      'expired, opt.exp more than actor.max_ttl_s ahead, replayed, a to.addr.host that is not a peer id, a from.addr.host that is set and is not this node',
  },
  403: {
    description: 'an unsigned envelope from a browser, an unsigned envelope asking for a capability outside the caller\'s rest.roles, or a capability the sender does not hold',
  },
  404: { description: 'an unknown local actor or behavior' },
  429: { description: 'the rate limit (rest.rate_limit), or too many of the client\'s requests waiting (rest.max_pending_per_client)' },
  503: { description: 'a bounded queue is full: a mailbox, the replay cache or the sender\'s share of it, rest.max_pending, or the client\'s reply bytes' },
};
const UNROUTABLE = 'the node is not initialized, the destination is unreachable, or sending failed';

/** The actor message interface: handle, send, invoke, broadcast. */
export const actorRoutes: RouteModule = ({ table, config, http }) => {
  const limit = config.rest.body_limit;

  table.add({
    method: 'GET',
    path: '/api/v1/actor/handle',
    operationId: 'getRootHandle',
    summary: "The root actor's handle",
    description: 'Its `addr.host` is the host a REST client puts in `from.addr.host` (or leaves empty).',
    tags: ['actor'],
    responses: { 200: { description: "the root actor's Handle", schema: HandleJson }, 500: { description: 'the node is not initialized' } },
    handler: () => http.rootHandle(),
  });

  table.add({
    method: 'POST',
    path: '/api/v1/actor/send',
    operationId: 'sendEnvelope',
    summary: 'Deliver an envelope without waiting for a reply',
    tags: ['actor'],
    body: { ...envelope, description: 'The envelope; without `sig` only from a trusted local caller (rest.allow_unsigned), which the node signs as its operator.' },
    responses: { ...ENVELOPE_ANSWERS, 200: { description: 'the envelope was delivered or sent on', schema: Sent }, 500: { description: UNROUTABLE } },
    handler: async (event): Promise<z.output<typeof Sent>> => {
      await http.send(await readBodyText(event, limit), restCaller(event));
      return { message: 'message sent' };
    },
  });

  table.add({
    method: 'POST',
    path: '/api/v1/actor/invoke',
    operationId: 'invokeEnvelope',
    summary: 'Deliver an envelope and answer with its reply',
    description:
      'The envelope needs `opt.cont`. An actor that fails answers an error reply, `{"error", "kind"}` as its payload: that is still a 200 with the reply envelope.',
    tags: ['actor'],
    body: { ...envelope, description: 'The envelope, with `opt.cont` where the reply goes.' },
    responses: {
      ...ENVELOPE_ANSWERS,
      200: { description: 'the reply envelope', schema: EnvelopeJson },
      408: { description: 'no reply before opt.exp' },
      409: { description: 'a request from the same inbox already waits at that opt.cont' },
      500: { description: UNROUTABLE },
    },
    handler: async (event) => {
      const reply = await http.invoke(await readBodyText(event, limit), (f) => onClientGone(event, f), restCaller(event));
      return new JsonBody(encodeEnvelope(reply));
    },
  });

  table.add({
    method: 'POST',
    path: '/api/v1/actor/broadcast',
    operationId: 'broadcastEnvelope',
    summary: 'Publish an envelope to a topic and answer with the replies collected',
    description:
      'The envelope\'s `to` is `{}` and it has `opt.topic`. The answer comes when opt.exp passes, when `limit` or rest.max_broadcast_replies replies arrived, ' +
      'when the replies reach rest.max_broadcast_bytes (a single larger reply is dropped), or when the client\'s waiting requests hold rest.max_pending_bytes_per_client of replies.',
    tags: ['actor'],
    query: BroadcastQuery,
    body: { ...envelope, description: 'The envelope, with `to: {}`, `opt.topic` and `opt.cont`.' },
    responses: {
      ...ENVELOPE_ANSWERS,
      200: { description: 'the reply envelopes collected', schema: z.array(EnvelopeJson) },
      409: { description: 'a request from the same inbox already waits at that opt.cont' },
      500: { description: UNROUTABLE },
    },
    handler: async (event, input) => {
      const max = input.query().limit;
      const replies = await http.broadcast(await readBodyText(event, limit), max, (f) => onClientGone(event, f), restCaller(event));
      return new JsonBody(`[${replies.map(encodeEnvelope).join(',')}]`);
    },
  });
};
