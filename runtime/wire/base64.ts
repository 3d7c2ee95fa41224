import { invalid } from '../errors.js';

// Standard alphabet (RFC 4648 §4). Padding may be omitted by a sender; what is signed is
// always the padded re-encoding of the decoded bytes (README "Wire format": the canonical JSON).
export const STANDARD_B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$/;

/** Decodes standard base64 strictly: a wrong alphabet, length or padding is invalid input. */
export function decodeBase64(text: string, field: string): Uint8Array {
  if (!STANDARD_B64.test(text)) throw invalid(`${field}: not valid standard base64`);
  const buf = Buffer.from(text, 'base64');
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

export function encodeBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}
