/** One REST call under /api/v1 to a bench's node, its JSON answer; anything but a 2xx throws, naming the call. */
export async function call(node: { url: string }, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${node.url}/api/v1${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status >= 300) throw new Error(`${method} ${path} answered ${res.status}: ${await res.text()}`);
  return res.json();
}
