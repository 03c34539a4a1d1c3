package effectivelyonce.inventory;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import tools.jackson.databind.JsonNode;

/**
 * The OrderPlaced payload as inventory reads it, with the saga's field limits
 * (services/saga_fields.py: what the orders API accepts, every service downstream accepts).
 * Strict: no number coerced from a string; extra fields are kept, not refused. No I/O here.
 */
public record OrderPlacedPayload(
    String orderId, String customerEmail, String paymentMethod, long amountCents, List<Line> lines) {

  public record Line(String sku, int quantity) {}

  public static final int MAX_LINES = 20;
  public static final int MAX_QUANTITY = 100;
  public static final long MAX_AMOUNT_CENTS = 100_000_000L;

  private static final Pattern CONTROL = Pattern.compile("[\\x00-\\x1f\\x7f-\\x9f]");
  private static final String ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  private static final Pattern LOCAL_PART = Pattern.compile(ATEXT + "+(?:\\." + ATEXT + "+)*");
  private static final Pattern LABEL = Pattern.compile("[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?");
  private static final Pattern SKU = Pattern.compile("sku-[a-z0-9-]{1,40}");
  private static final Pattern PAYMENT_METHOD = Pattern.compile("pm_[a-z0-9_]{1,60}");

  /** A field that does not fit; the message names it. */
  public static final class Misfit extends IllegalArgumentException {
    Misfit(String message) {
      super(message);
    }
  }

  /** The payload as OrderPlaced, or a Misfit naming the first field that does not fit. */
  public static OrderPlacedPayload read(JsonNode payload) {
    JsonNode lines = payload.get("lines");
    if (lines == null || !lines.isArray()) {
      throw misfit("lines", "Input should be a valid list");
    }
    if (lines.size() < 1 || lines.size() > MAX_LINES) {
      throw misfit("lines", "List should have 1 to " + MAX_LINES + " items");
    }
    String orderId = orderId(payload.get("order_id"));
    String email = text(payload.get("customer_email"), "customer_email");
    String problem = emailProblem(email);
    if (problem != null) {
      throw misfit("customer_email", problem);
    }
    String method = matching(payload.get("payment_method"), PAYMENT_METHOD, "payment_method");
    long amount = whole(payload.get("amount_cents"), 1, MAX_AMOUNT_CENTS, "amount_cents");
    List<Line> read = new ArrayList<>();
    for (int index = 0; index < lines.size(); index++) {
      JsonNode line = lines.get(index);
      String where = "lines." + index;
      if (!line.isObject()) {
        throw misfit(where, "Input should be an object");
      }
      read.add(new Line(matching(line.get("sku"), SKU, where + ".sku"),
          (int) whole(line.get("quantity"), 1, MAX_QUANTITY, where + ".quantity")));
    }
    return new OrderPlacedPayload(orderId, email, method, amount, List.copyOf(read));
  }

  /** Why `address` is not one every service of the saga accepts (RFC 5322 dot-atom, RFC 5321 lengths), or null. */
  public static String emailProblem(String address) {
    if (address.length() > 254) {
      return "an email address is at most 254 characters (RFC 5321)";
    }
    int at = address.lastIndexOf('@');
    String local = at < 0 ? "" : address.substring(0, at);
    String domain = at < 0 ? "" : address.substring(at + 1);
    if (local.isEmpty() || domain.isEmpty()) {
      return "an email address needs a local part, an @ and a domain";
    }
    if (local.length() > 64) {
      return "the part before the @ is at most 64 characters (RFC 5321)";
    }
    if (!LOCAL_PART.matcher(local).matches()) {
      return "the part before the @ may hold letters, digits, !#$%&'*+/=?^_`{|}~- and single dots inside";
    }
    String[] labels = domain.split("\\.", -1);
    if (domain.length() > 253 || labels.length < 2) {
      return "the domain needs at least two labels and at most 253 characters";
    }
    for (String label : labels) {
      if (label.length() > 63 || !LABEL.matcher(label).matches()) {
        return "each domain label is 1-63 letters, digits or inner hyphens";
      }
    }
    if (labels[labels.length - 1].chars().allMatch(Character::isDigit)) {
      return "the top-level domain cannot be all digits";
    }
    return null;
  }

  private static Misfit misfit(String field, String message) {
    return new Misfit("OrderPlaced payload: " + field + ": " + message);
  }

  private static String text(JsonNode value, String field) {
    if (value == null || !value.isString()) {
      throw misfit(field, "Input should be a valid string");
    }
    return value.asString();
  }

  private static String matching(JsonNode value, Pattern pattern, String field) {
    String text = text(value, field);
    if (!pattern.matcher(text).matches()) {
      throw misfit(field, "String should match pattern '^" + pattern.pattern() + "$'");
    }
    return text;
  }

  private static long whole(JsonNode value, long low, long high, String field) {
    if (value == null || !value.isIntegralNumber() || !value.canConvertToLong()) {
      throw misfit(field, "Input should be a valid integer");
    }
    long number = value.asLong();
    if (number < low || number > high) {
      throw misfit(field, "Input should be between " + low + " and " + high);
    }
    return number;
  }

  private static String orderId(JsonNode value) {
    String id = text(value, "order_id");
    if (id.isEmpty() || id.codePointCount(0, id.length()) > 255) {
      throw misfit("order_id", "String should have 1 to 255 characters");
    }
    if (id.codePoints().anyMatch(c -> c >= 0xD800 && c <= 0xDFFF)) {
      throw misfit("order_id", "text must be valid Unicode (it holds a lone UTF-16 surrogate)");
    }
    if (CONTROL.matcher(id).find()) {
      throw misfit("order_id", "text must not hold control characters (NUL, line breaks, escapes)");
    }
    if (id.isBlank()) {
      throw misfit("order_id", "must not be blank");
    }
    return id;
  }
}
