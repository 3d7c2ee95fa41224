/**
 * The OpenAPI 3.1 document of the REST interface, written from the route table
 * (./route-table.ts): every route the app answers, described with the zod schemas that check
 * its requests. Schemas become JSON Schema (draft 2020-12) by z.toJSONSchema: request bodies,
 * path and query parameters as they are accepted (`io: 'input'`, short forms included, see
 * behaviors/input-forms.ts), answers as they are sent (`io: 'output'`). Served at
 * GET /api/v1/openapi.json, behind the same credentials as any GET.
 */
import * as z from 'zod';
import { acceptedInput } from '../behaviors/input-forms.js';
import { ROLES } from '../runtime/api-keys.js';
import { isOpenPath, roleAllows } from './auth.js';
import { ErrorBody, JsonBody } from './errors.js';
import type { ResponseDoc, RouteDoc, RouteTable } from './route-table.js';

export const OPENAPI_PATH = '/api/v1/openapi.json';

type Json = Record<string, unknown>;
type Io = 'input' | 'output';

/** A zod schema as JSON Schema (without `$schema`: it sits inside the document). */
export function jsonSchema(schema: z.ZodType, io: Io): Json {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, {
    target: 'draft-2020-12',
    io,
    // Transforms (query parameters read as numbers, sizes normalised) say what they accept, not what they make.
    unrepresentable: 'any',
    override: (ctx) => {
      const accepts = io === 'input' ? acceptedInput(ctx.zodSchema) : undefined;
      if (!accepts) return;
      const js = ctx.jsonSchema as Json;
      const kept = { default: js.default, description: js.description };
      for (const k of Object.keys(js)) delete js[k];
      Object.assign(js, jsonSchema(accepts, io));
      for (const [k, v] of Object.entries(kept)) if (v !== undefined) js[k] = v;
    },
  });
  return rest;
}

export interface DocumentOptions {
  /** This node's software version (package.json). */
  version: string;
  /** The REST credentials this node takes: `auth.api_key_enabled`, `auth.jwt_secret`. */
  auth: { apiKey: boolean; jwt: boolean };
}

const TAGS: Record<string, string> = {
  system: 'Health, configuration and this document',
  actor: 'The actor message interface: envelopes in, replies out',
  jobs: "Jobs: submit, list, inspect, cancel and read output (the orchestrator's behaviors)",
  resources: "Resources and allocations (the resource manager's behaviors)",
  device: "This device's status and the operator's settings for it",
  dev: 'Dev mode: what happens inside the node',
};

const SECURITY_SCHEMES = {
  ApiKey: {
    type: 'apiKey',
    in: 'header',
    name: 'X-API-Key',
    description: 'An API key made with `dms auth apikey create --role R` (stored hashed); taken when auth.api_key_enabled (DMS_API_KEY_ENABLED) is on.',
  },
  BearerJWT: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'JWT',
    description:
      'An HS256 JWT with `exp` and a `role` claim (`dms auth token --role R`), signed with auth.jwt_secret (DMS_JWT_SECRET); ' +
      'lifetime at most auth.jwt_max_lifetime_s, `iss`/`aud` checked when auth.jwt_issuer/auth.jwt_audience are set.',
  },
};

const ERROR_REF = { $ref: '#/components/schemas/Error' };

const openApiPath = (path: string): string => path.replace(/:(\w+)/g, '{$1}');

/** What any route may answer besides its own outcomes, by status. */
function commonAnswers(route: RouteDoc, authOn: boolean): Record<number, string> {
  const out: Record<number, string> = {
    403: 'a Host this node does not answer (DNS rebinding), a foreign Origin outside rest.cors.origins, or a listed one without an API key or JWT',
    500: "the node's own failure: `internal error (id …)`, the id in its log with the details",
  };
  if (authOn && !isOpenPath(route.path)) {
    out[401] = 'missing or invalid credentials';
    out[403] += '; a role that may not make this request';
  }
  if (route.params || route.query) out[400] = 'a path or query parameter its schema refuses, named';
  if (route.body) {
    out[400] = `${out[400] ? `${out[400]}; ` : ''}a body that is not JSON`;
    out[413] = 'a body larger than rest.body_limit';
    out[415] = 'a body that is not Content-Type: application/json';
  }
  return out;
}

const RETRY_AFTER = { description: 'Seconds to wait before trying again', schema: { type: 'integer', minimum: 0 } };

function response(status: number, doc: ResponseDoc | undefined, common: string | undefined): Json {
  const out: Json = { description: [doc?.description, common].filter(Boolean).join('; ') };
  const content: Json = {};
  if (doc?.schema) content['application/json'] = { schema: jsonSchema(doc.schema, 'output') };
  else if (status >= 400 && !doc?.content) content['application/json'] = { schema: ERROR_REF };
  for (const [type, c] of Object.entries(doc?.content ?? {})) {
    const media: Json = { schema: { type: 'string', description: c.description } };
    // Server-sent events: the JSON `data` of each event type, by its `event:` name.
    if (c.events) media['x-events'] = Object.fromEntries(Object.entries(c.events).map(([name, s]) => [name, jsonSchema(s, 'output')]));
    content[type] = media;
  }
  if (Object.keys(content).length) out.content = content;
  const headers: Json = Object.fromEntries(
    Object.entries(doc?.headers ?? {}).map(([name, h]) => [name, { description: h.description, schema: jsonSchema(h.schema, 'output') }]),
  );
  if (status === 429 || status === 503) headers['Retry-After'] = RETRY_AFTER;
  if (Object.keys(headers).length) out.headers = headers;
  return out;
}

function parameters(route: RouteDoc): Json[] {
  const out: Json[] = Object.entries(route.params ?? {}).map(([name, p]) => ({
    name,
    in: 'path',
    required: true,
    description: p.what,
    schema: jsonSchema(p.schema, 'input'),
  }));
  if (route.query) {
    const q = jsonSchema(route.query, 'input') as { properties?: Record<string, Json>; required?: string[] };
    for (const [name, { description, ...schema }] of Object.entries(q.properties ?? {})) {
      out.push({ name, in: 'query', required: q.required?.includes(name) ?? false, ...(description ? { description } : {}), schema });
    }
  }
  return out;
}

function operation(route: RouteDoc, authOn: boolean): Json {
  const op: Json = { operationId: route.operationId, summary: route.summary, tags: route.tags };
  const roles = ROLES.filter((r) => roleAllows(r, route.method, route.path));
  const who = isOpenPath(route.path) ? 'Open to anyone: no credentials.' : authOn ? `REST roles allowed: ${roles.join(', ')}.` : '';
  const description = [route.description, who].filter(Boolean).join('\n\n');
  if (description) op.description = description;
  const params = parameters(route);
  if (params.length) op.parameters = params;
  if (route.body) {
    op.requestBody = {
      required: true,
      ...(route.body.description ? { description: route.body.description } : {}),
      content: { 'application/json': { schema: jsonSchema(route.body.schema, 'input') } },
    };
  }
  const common = commonAnswers(route, authOn);
  const statuses = [...new Set([...Object.keys(route.responses), ...Object.keys(common)].map(Number))].sort((a, b) => a - b);
  op.responses = Object.fromEntries(statuses.map((s) => [String(s), response(s, route.responses[s], common[s])]));
  if (authOn && isOpenPath(route.path)) op.security = [];
  return op;
}

/** The OpenAPI 3.1 document of every route in `routes`. */
export function openApiDocument(routes: readonly RouteDoc[], o: DocumentOptions): Json {
  const authOn = o.auth.apiKey || o.auth.jwt;
  const paths: Record<string, Json> = {};
  for (const r of routes) (paths[openApiPath(r.path)] ??= {})[r.method.toLowerCase()] = operation(r, authOn);
  const tags = [...new Set(routes.flatMap((r) => r.tags))].map((name) => (TAGS[name] ? { name, description: TAGS[name] } : { name }));
  const enabled = [o.auth.apiKey ? 'ApiKey' : '', o.auth.jwt ? 'BearerJWT' : ''].filter(Boolean);
  return {
    openapi: '3.1.0',
    info: {
      title: 'DMS node REST interface',
      version: o.version,
      description:
        'The REST interface of one DMS node. Bodies are JSON and must say so (Content-Type: application/json, else 415). ' +
        'Every error body is `{"error": "<text>"}`. Requests pass Host and Origin checks first (403). ' +
        (authOn
          ? 'REST auth is on at this node: send an API key or a bearer JWT as listed; roles are admin (everything), operator (reads, the actor interface and jobs) and viewer (reads only).'
          : 'REST auth is off at this node (the default while it listens on loopback): no credentials are needed.'),
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    tags,
    paths,
    components: { schemas: { Error: jsonSchema(ErrorBody, 'output') }, securitySchemes: SECURITY_SCHEMES },
    ...(enabled.length ? { security: enabled.map((name) => ({ [name]: [] })) } : {}),
  };
}

/** The document's own shape, as far as a client relies on it. */
const OpenApiDocumentSchema = z.looseObject({
  openapi: z.literal('3.1.0'),
  info: z.looseObject({ title: z.string(), version: z.string() }),
  paths: z.record(z.string(), z.record(z.string(), z.unknown())),
});

/** GET /api/v1/openapi.json: the document of the whole table, itself included, written once on first request. */
export function addOpenApiRoute(table: RouteTable, o: DocumentOptions): void {
  let text: string | undefined;
  table.add({
    method: 'GET',
    path: OPENAPI_PATH,
    operationId: 'getOpenApiDocument',
    summary: 'This document: the OpenAPI 3.1 description of the REST interface',
    description: 'Written from the same route table and zod schemas that route and check every request, so it lists every route this node answers.',
    tags: ['system'],
    responses: { 200: { description: 'the OpenAPI 3.1 document', schema: OpenApiDocumentSchema } },
    handler: () => new JsonBody((text ??= JSON.stringify(openApiDocument(table.routes, o)))),
  });
}
