/**
 * What every server-sent event stream of the node shares: its headers, and a comment line
 * (`: …`, which every reader of server-sent events skips) written when it has been quiet for
 * `rest.sse_keepalive_s`. A stream with nothing to say for 300 s lost its reader: Node's fetch, which
 * `dms` and most scripts read with, ends a response whose body brings nothing for that long
 * (`dms jobs logs -f` of a job that printed nothing for 5 minutes stopped with it), and proxies
 * end quiet connections sooner (60 s is common).
 */
export const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-store, no-transform',
  // A proxy in front of the node must not hold events back.
  'x-accel-buffering': 'no',
};

/** The comment a quiet stream writes: no event, only bytes that say the stream is alive. */
export const KEEPALIVE = ': keep-alive\n\n';
