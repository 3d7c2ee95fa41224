import { describe, expect, it } from 'vitest';
import { errorReply, parseErrorReply, replyToError } from '../../runtime/error-reply.js';
import { DmsError, ERROR_KINDS } from '../../runtime/errors.js';

describe('error replies', () => {
  it('carry the DmsError text and kind, and turn back into the same DmsError', () => {
    for (const kind of ERROR_KINDS) {
      const reply = errorReply(new DmsError(kind, `failed as ${kind}`));
      expect(reply).toEqual({ error: `failed as ${kind}`, kind });
      expect(parseErrorReply(reply)).toEqual(reply);
      expect(replyToError(parseErrorReply(reply)!)).toMatchObject({ kind, message: `failed as ${kind}` });
    }
  });

  it('are recognized without a kind (older nodes) or with one this node does not know, as internal', () => {
    expect(replyToError(parseErrorReply({ error: 'old node' })!)).toMatchObject({ kind: 'internal', message: 'old node' });
    expect(replyToError(parseErrorReply({ error: 'new node', kind: 'quota_exceeded' })!)).toMatchObject({ kind: 'internal' });
  });

  it('are not confused with results that have an error field', () => {
    // A failed job record: a string `error` among its other fields is a result, not a failure.
    expect(parseErrorReply({ id: 'j1', status: 'failed', error: 'exit code 2', exit_code: 2 })).toBeUndefined();
    expect(parseErrorReply({ error: 'x', kind: 'invalid', extra: 1 })).toBeUndefined();
    expect(parseErrorReply({ error: 42 })).toBeUndefined();
    expect(parseErrorReply({ error: 'x', kind: 7 })).toBeUndefined();
    for (const v of [null, 'error', [{ error: 'x' }], {}, { did: 'd' }]) expect(parseErrorReply(v)).toBeUndefined();
  });
});
