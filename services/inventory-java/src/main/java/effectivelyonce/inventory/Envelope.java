package effectivelyonce.inventory;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import tools.jackson.core.JacksonException;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

/**
 * The event envelope, decoded and validated on the way in with the same poison reasons as the
 * Python runtime (effectively_once/envelope.py). `key` is the order id, the Kafka key.
 */
public record Envelope(
    String messageId, String type, String key, JsonNode payload, String occurredAt, int version, String traceId) {

  public static final int MAX_MESSAGE_ID_LENGTH = 255;
  public static final int MAX_BODY_BYTES = 512 * 1024;
  static final JsonMapper JSON = JsonMapper.builder().build();

  /** Parse and validate one message body, or throw PoisonMessage with the reason. */
  public static Envelope decode(byte[] raw) {
    if (raw == null || raw.length == 0) {
      throw new PoisonMessage("empty_body", "the message has no body", null);
    }
    if (raw.length > MAX_BODY_BYTES) {
      throw new PoisonMessage("oversized", raw.length + " bytes is more than " + MAX_BODY_BYTES, null);
    }
    JsonNode body;
    try {
      String text = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(raw))
          .toString();
      body = JSON.readTree(text);
    } catch (CharacterCodingException | JacksonException error) {
      throw new PoisonMessage("undecodable", "not UTF-8 JSON (" + error.getClass().getSimpleName() + ")", null);
    }
    if (body == null || !body.isObject()) {
      throw new PoisonMessage("undecodable", "the JSON body is not an object", null);
    }
    JsonNode id = body.get("message_id");
    if (id == null || id.isNull() || (id.isString() && id.asString().isEmpty())) {
      throw new PoisonMessage("missing_message_id", "message_id is missing or empty", null);
    }
    String messageId = text(body, "message_id", null, MAX_MESSAGE_ID_LENGTH);
    String type = text(body, "type", messageId, 100);
    String key = text(body, "key", messageId, 255);
    JsonNode version = body.get("version");
    int versionNumber = 1;
    if (version != null) {
      if (!version.isIntegralNumber() || !version.canConvertToInt() || version.asInt() < 1) {
        throw new PoisonMessage("invalid_version", "version must be a positive integer", messageId);
      }
      versionNumber = version.asInt();
    }
    JsonNode occurred = body.get("occurred_at");
    String occurredAt = occurred == null || occurred.isNull() ? "" : occurred.asString();
    try {
      OffsetDateTime.parse(occurredAt.replace(' ', 'T'));
    } catch (DateTimeParseException error) {
      throw new PoisonMessage("invalid_occurred_at", "occurred_at must be an ISO-8601 time with a zone", messageId);
    }
    JsonNode trace = body.get("trace_id");
    if (trace != null && !trace.isNull() && !trace.isString()) {
      throw new PoisonMessage("invalid_trace_id", "trace_id must be a string", messageId);
    }
    JsonNode payload = body.get("payload");
    if (payload == null || payload.isNull()) {
      payload = JSON.createObjectNode();
    } else if (!payload.isObject()) {
      throw new PoisonMessage("invalid_payload", "payload must be a JSON object", messageId);
    }
    return new Envelope(messageId, type, key, payload, occurredAt, versionNumber,
        trace == null || trace.isNull() ? null : trace.asString());
  }

  /** A new event with a new, permanent message id (for the outbox). */
  public static Envelope create(String type, String key, Map<String, Object> payload, String traceId) {
    return new Envelope(UUID.randomUUID().toString(), type, key, JSON.valueToTree(new HashMap<>(payload)),
        OffsetDateTime.now().toString(), 1, traceId != null ? traceId : UUID.randomUUID().toString().replace("-", ""));
  }

  private static String text(JsonNode body, String name, String messageId, int limit) {
    JsonNode value = body.get(name);
    if (value == null || !value.isString() || value.asString().isEmpty()) {
      throw new PoisonMessage("invalid_" + name, name + " must be a non-empty string", messageId);
    }
    String text = value.asString();
    if (text.codePointCount(0, text.length()) > limit) {
      throw new PoisonMessage("invalid_" + name, name + " is longer than " + limit + " characters", messageId);
    }
    if (!printable(text)) {
      throw new PoisonMessage("invalid_" + name, name + " contains unprintable characters", messageId);
    }
    return text;
  }

  /** What Python's str.isprintable() accepts: no control, format, surrogate, private-use or
   * unassigned characters, and no separator but the plain space. */
  private static boolean printable(String text) {
    return text.codePoints().allMatch(c -> {
      int kind = Character.getType(c);
      boolean separator = kind == Character.SPACE_SEPARATOR || kind == Character.LINE_SEPARATOR
          || kind == Character.PARAGRAPH_SEPARATOR;
      return c == ' ' || !(separator || kind == Character.CONTROL || kind == Character.FORMAT
          || kind == Character.SURROGATE || kind == Character.PRIVATE_USE || kind == Character.UNASSIGNED);
    });
  }
}
