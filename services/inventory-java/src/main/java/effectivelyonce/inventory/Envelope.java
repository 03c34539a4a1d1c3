package effectivelyonce.inventory;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.regex.Pattern;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import tools.jackson.core.JacksonException;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

/**
 * The event envelope, decoded and validated on the way in with the same poison reasons as the
 * Python runtime (effectively_once/envelope.py). `key` is the order id, the Kafka key.
 *
 * A message from Kafka keeps its body (`body`) and its record's key and headers (`delivery`, as
 * JSON: {"key": hex, "headers": {name: [hex, ...]}}): the marker stores a digest of them (the database's message_content_digest, migration
 * 0008), so that a copy with the same id and other content is counted apart. Its `eo-message-id`
 * header, when present, must name the envelope's id.
 */
public record Envelope(
    String messageId, String type, String key, JsonNode payload, String occurredAt, int version, String traceId,
    String body, String delivery) {

  public static final int MAX_MESSAGE_ID_LENGTH = 255;
  public static final int MAX_BODY_BYTES = 512 * 1024;
  public static final String MESSAGE_ID_HEADER = "eo-message-id";
  static final JsonMapper JSON = JsonMapper.builder().build();
  private static final SecureRandom RANDOM = new SecureRandom();
  private static final Pattern TIMED_ID =
      Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");

  /** Parse and validate one record: its body, and its `eo-message-id` header against the envelope's id. */
  public static Envelope decode(byte[] raw, byte[] recordKey, Headers headers) {
    Envelope event = decode(raw);
    Map<String, List<String>> values = new LinkedHashMap<>();
    for (Header header : headers) {
      if (header.key().equals(MESSAGE_ID_HEADER)
          && (header.value() == null || !Arrays.equals(header.value(), event.messageId().getBytes(StandardCharsets.UTF_8)))) {
        throw new PoisonMessage("message_id_mismatch",
            "its " + MESSAGE_ID_HEADER + " header does not name the envelope's message_id", event.messageId());
      }
      values.computeIfAbsent(header.key(), name -> new ArrayList<>())
          .add(header.value() == null ? null : HexFormat.of().formatHex(header.value()));
    }
    Map<String, Object> delivery = new LinkedHashMap<>();
    delivery.put("key", recordKey == null ? null : HexFormat.of().formatHex(recordKey));
    delivery.put("headers", values);
    return new Envelope(event.messageId, event.type, event.key, event.payload, event.occurredAt, event.version,
        event.traceId, event.body, JSON.writeValueAsString(delivery));
  }

  /** Parse and validate one message body, or throw PoisonMessage with the reason. */
  public static Envelope decode(byte[] raw) {
    if (raw == null || raw.length == 0) {
      throw new PoisonMessage("empty_body", "the message has no body", null);
    }
    if (raw.length > MAX_BODY_BYTES) {
      throw new PoisonMessage("oversized", raw.length + " bytes is more than " + MAX_BODY_BYTES, null);
    }
    JsonNode body;
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(raw))
          .toString();
      body = JSON.readTree(text);
    } catch (CharacterCodingException | JacksonException error) {
      throw new PoisonMessage("undecodable", "not UTF-8 JSON (" + error.getClass().getSimpleName() + ")", null);
    }
    if (text.contains("\\u") && !storable(body)) {
      throw new PoisonMessage("undecodable", "a string holds a NUL character or a lone surrogate", null);
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
        trace == null || trace.isNull() ? null : trace.asString(), text, null);
  }

  /** A new event with a new, permanent message id, a UUIDv7 (for the outbox). */
  public static Envelope create(String type, String key, Map<String, Object> payload, String traceId) {
    return new Envelope(newMessageId(), type, key, JSON.valueToTree(new HashMap<>(payload)),
        OffsetDateTime.now().toString(), 1, traceId != null ? traceId : UUID.randomUUID().toString().replace("-", ""),
        null, null);
  }

  /** A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits and the variant. */
  static String newMessageId() {
    long milliseconds = System.currentTimeMillis();
    long high = (milliseconds & 0xFFFF_FFFF_FFFFL) << 16 | 0x7000L | (RANDOM.nextLong() & 0x0FFFL);
    long low = (RANDOM.nextLong() & 0x3FFF_FFFF_FFFF_FFFFL) | 0x8000_0000_0000_0000L;
    return new UUID(high, low).toString();
  }

  /** The time a UUIDv7 message id carries, or null for an untimed id (as the database's message_id_time). */
  static Instant idTime(String messageId) {
    if (!TIMED_ID.matcher(messageId).matches()) {
      return null;
    }
    return Instant.ofEpochMilli(Long.parseLong(messageId.substring(0, 8) + messageId.substring(9, 13), 16));
  }

  /** Whether PostgreSQL's jsonb can hold every string in `node`: no NUL and no lone surrogate. */
  private static boolean storable(JsonNode node) {
    if (node == null) {
      return true;
    }
    if (node.isString()) {
      return encodable(node.asString());
    }
    for (Map.Entry<String, JsonNode> field : node.properties()) {
      if (!encodable(field.getKey()) || !storable(field.getValue())) {
        return false;
      }
    }
    for (JsonNode item : node.values()) {
      if (!storable(item)) {
        return false;
      }
    }
    return true;
  }

  private static boolean encodable(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == 0) {
        return false;
      }
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(i + 1))) {
          return false;
        }
        i++;
      } else if (Character.isLowSurrogate(c)) {
        return false;
      }
    }
    return true;
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
