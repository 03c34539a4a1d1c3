/**
 * Where a rewind moves one partition: back, never forward (the Python runtime's rewind_target).
 *
 * A rewind delivers again what the group acknowledged; it must never skip what the member has not
 * had. So a partition goes to the first message at the rewind's time or to where the member stands
 * (its group's committed offset: the loop commits only what it acknowledged), whichever is
 * earlier, and stays where it stands when no message is at the time.
 *
 * `atTime`: the first offset at or after the time, negative when none, null for a rewind to the
 * beginning. `standsAt`: the committed offset, null when the group has none. Returns the offset to
 * seek to, or null for the partition's beginning.
 */
export function rewindTarget(atTime: bigint | null, standsAt: bigint | null): bigint | null {
  if (atTime === null || standsAt === null || standsAt < 0n) return null;
  if (atTime < 0n) return standsAt;
  return atTime < standsAt ? atTime : standsAt;
}
