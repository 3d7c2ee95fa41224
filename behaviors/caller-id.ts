/**
 * An id as a caller names it (a job's, an ensemble's, an allocation's): any text of up to 100
 * characters but a control character, which no id holds. A prefix is a name too (the CLI takes
 * short ids), so it is not held to an id's own form here. Without the control check an ensemble
 * id `%00` reached the store and was answered 404 "not found", where a job id was 400.
 */
import * as z from 'zod';

export const callerId = (what: string) =>
  z
    .string()
    .min(1)
    .max(100)
    .regex(/^[^\u0000-\u001f\u007f]*$/, `${what} holds no control character`);
