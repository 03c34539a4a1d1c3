package effectivelyonce.inventory;

/**
 * Where a rewind moves one partition: back, never forward (the Python runtime's rewind_target).
 *
 * A rewind delivers again what the group acknowledged; it must never skip what the member has not
 * had. So a partition goes to the first message at the rewind's time or to where the member
 * stands (its position, taken on the consumer's thread just before the seek), whichever is
 * earlier, and stays where it stands when no message is at the time. (Spring's seekToTimestamp
 * seeks to the end in that case, resolved only at the next fetch: a message published meanwhile
 * would be skipped.)
 */
final class RewindTarget {
  private RewindTarget() {}

  /**
   * @param atTime the first offset at or after the time, negative when no message is
   * @param standsAt the member's position: the offset it would be given next
   */
  static long of(long atTime, long standsAt) {
    return atTime < 0 ? standsAt : Math.min(atTime, standsAt);
  }
}
