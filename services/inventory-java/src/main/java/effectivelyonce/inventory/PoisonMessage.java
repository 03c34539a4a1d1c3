package effectivelyonce.inventory;

/** A message no retry can ever process: it goes to the dead-letter topic at once, with its reason. */
public final class PoisonMessage extends RuntimeException {
  public final String reason;
  public final String detail;
  public final String messageId;

  public PoisonMessage(String reason, String detail, String messageId) {
    super(reason + ": " + detail);
    this.reason = reason;
    this.detail = detail;
    this.messageId = messageId;
  }
}
