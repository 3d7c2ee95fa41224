/** The subscriber bench/lib/subscribe-events.mjs puts on `dms:event`. */
export declare const drop: () => void;
