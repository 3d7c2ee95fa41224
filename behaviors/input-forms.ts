/**
 * What a normalising schema (z.preprocess) accepts besides its canonical form. z.toJSONSchema
 * can describe only the canonical schema inside a preprocess, so a document written from it
 * would refuse the short forms people write (`"memory": "512MiB"`, `"cpu": 0.5`). A schema that
 * normalises its input registers here what it accepts, and the OpenAPI document (http/openapi.ts)
 * describes request bodies with that instead.
 */
import type * as z from 'zod';

const forms = new WeakMap<z.core.$ZodType, z.ZodType>();

/** `schema`, registered as accepting what `accepts` describes (which should reuse the canonical schema, so the two cannot drift). */
export function acceptsAlso<S extends z.ZodType>(schema: S, accepts: z.ZodType): S {
  forms.set(schema, accepts);
  return schema;
}

/** What a schema registered with acceptsAlso accepts; undefined for any other. */
export const acceptedInput = (schema: z.core.$ZodType): z.ZodType | undefined => forms.get(schema);
