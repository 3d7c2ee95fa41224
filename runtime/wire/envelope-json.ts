/**
 * The envelope's JSON form as a zod schema, for documentation: the OpenAPI document describes
 * the bodies of /api/v1/actor/send|invoke|broadcast and their replies with it. The node itself
 * reads envelopes with parseEnvelope (./envelope.ts): a lossless parse, then WireEnvelope, then
 * base64 and signature checks by hand. This schema is WireEnvelope with those hand-made checks
 * written as schema checks, so the fields it shares cannot drift; test/unit/envelope-json.test.ts
 * keeps it accepting every wire vector and refusing what parseEnvelope refuses.
 *
 * It validates what parseJsonLossless gives: integers as bigint, since `nonce` and `opt.exp` are
 * uint64 and do not fit a JavaScript number.
 */
import * as z from 'zod';
import { STANDARD_B64 } from './base64.js';
import { SIGNATURE_BYTES, WireEnvelope } from './envelope.js';

/** A uint64 as JSON Schema can say it: an integer from 0, with the width as its format. */
const uint64 = (schema: z.ZodBigInt, description: string) =>
  schema.meta({
    type: 'integer',
    format: 'uint64',
    minimum: 0,
    description: `${description}. An unsigned 64-bit integer (at most 2^64−1) written as a JSON number with every digit: read and write it losslessly, it does not fit a double.`,
  });

const base64 = (description: string) =>
  z.string().regex(STANDARD_B64).meta({ contentEncoding: 'base64', description: `${description}, standard base64 (RFC 4648 §4; padding may be left out)` });

// SIGNATURE_BYTES bytes in base64, padding optional; empty is no signature, as parseEnvelope reads it.
const sigChars = Math.ceil((SIGNATURE_BYTES * 4) / 3);
const sigPadding = '='.repeat((3 - (SIGNATURE_BYTES % 3)) % 3);
const SIGNATURE_B64 = new RegExp(`^(?:[A-Za-z0-9+/]{${sigChars}}(?:${sigPadding})?)?$`);

const handle = (description: string) =>
  WireEnvelope.shape.to.meta({
    description: `${description}. Members left out or empty are empty: \`id\` (the key's multibase id), \`did\` (did:key: + id), \`addr.host\` (a node's peer id; empty for this node), \`addr.inbox\` (an actor's name on it).`,
  });

export const EnvelopeJson = WireEnvelope.extend({
  to: handle('Who the envelope is for; `{}` for a broadcast'),
  be: WireEnvelope.shape.be.meta({ description: 'The behavior to run, path-shaped: `/public/hello`, `/dms/job/submit`' }),
  from: handle('The sender: its key and the inbox replies go to'),
  nonce: uint64(WireEnvelope.shape.nonce, 'Unique per sender (from.id) while the envelope lives: a second one is refused as replayed'),
  opt: WireEnvelope.shape.opt.extend({
    exp: uint64(WireEnvelope.shape.opt.shape.exp, 'Expiry, nanoseconds since the Unix epoch; at most actor.max_ttl_s ahead'),
    cont: WireEnvelope.shape.opt.shape.cont.meta({ description: 'The behavior of `from` the reply goes to (invoke, broadcast)' }),
    topic: WireEnvelope.shape.opt.shape.topic.meta({ description: 'The topic a broadcast is published to' }),
  }),
  msg: base64('The payload (JSON for the node behaviors; empty means `{}`)'),
  cap: base64('Capability tokens').nullish(),
  sig: z
    .string()
    .regex(SIGNATURE_B64)
    .meta({ contentEncoding: 'base64', description: `Ed25519 signature (${SIGNATURE_BYTES} bytes, base64) over \`dms:msg:\` + the canonical JSON without sig; left out only by trusted local REST callers, for the node to sign` })
    .nullish(),
}).meta({ title: 'Envelope', description: 'A DMS wire format v1 envelope (README "Wire format")' });

/** An actor's handle as GET /api/v1/actor/handle answers it. */
export const HandleJson = handle('An actor\'s public handle');
