/** One REST call to a node (anything with a url), its JSON body parsed (null when empty). */
export async function rest(node: { url: string }, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${node.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}
