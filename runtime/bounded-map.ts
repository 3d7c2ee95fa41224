/**
 * Maps that remember the latest entries only: a Map keeps insertion order, so its first key is
 * the oldest, and whatever holds peers', requesters' or jobs' traces bounds itself this way.
 */

/** Sets `key` as the newest entry of `map`, dropping the oldest past `max`. */
export function rememberNewest<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > max) map.delete(map.keys().next().value!);
}
