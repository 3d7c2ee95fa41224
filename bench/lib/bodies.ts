import { msToNs, nowNs } from '../../runtime/time.js';

/*
 * Unsigned REST bodies for the hello behaviors, built on the fly: the node signs them as its
 * operator, as for any trusted local caller. Each has its own nonce (replay) and its own reply
 * behavior, opt.cont (one waiter per cont). The counter spans every body the bench makes and
 * starts from the clock, so a body never repeats one an earlier run sent.
 */
let n = Date.now() * 1000;

/** An invoke of /public/hello on `to`'s root, sent by `from` (peer ids), valid for `ttlMs`. */
export function helloInvoke(from: string, to: string, ttlMs: number): string {
  n++;
  return `{"to":{"addr":{"host":"${to}","inbox":"root"}},"be":"/public/hello","from":{"addr":{"host":"${from}","inbox":"bench"}},"nonce":${n},"opt":{"exp":${nowNs() + msToNs(ttlMs)},"cont":"/private/r/${n}"},"msg":"e30="}`;
}

/** A broadcast of /broadcast/hello on /dms/hello from `from` (a peer id), valid for `ttlMs`. */
export function helloBroadcast(from: string, ttlMs: number): string {
  n++;
  return `{"to":{},"be":"/broadcast/hello","from":{"addr":{"host":"${from}","inbox":"bench-b"}},"nonce":${n},"opt":{"exp":${nowNs() + msToNs(ttlMs)},"cont":"/private/b/${n}","topic":"/dms/hello"},"msg":"e30="}`;
}
