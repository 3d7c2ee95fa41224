/**
 * What the CLI prints is often others' words: a peer's name, labels and location, a provider's
 * error or reason for a job, a broadcast's replies, a result manifest's notes. A terminal takes
 * some characters as commands (an escape sequence moves the cursor, rewrites or hides lines,
 * sets the clipboard or the window title; a carriage return writes over a line) and Unicode's
 * bidirectional controls reorder what is read. Printed as their `\u` escapes instead, they are
 * seen rather than obeyed; line breaks and tabs stay.
 *
 * A job's own output (`dms run`, `dms jobs logs`) does not pass through here: it is the job's,
 * as a container's output is in `docker logs`.
 */

// C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional marks, embeddings,
// overrides and isolates.
// eslint-disable-next-line no-control-regex
const OBEYED = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export const terminalSafe = (text: string): string => text.replace(OBEYED, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
