package effectivelyonce.inventory;

import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.springframework.http.HttpStatus;
import org.springframework.stereotype.Component;
import org.springframework.web.filter.OncePerRequestFilter;
import tools.jackson.databind.JsonNode;

/**
 * Who may call the control endpoint, checked before any route: a Host that is a loopback name, an
 * IP literal or a name in ALLOWED_HOSTS (a DNS-rebinding page arrives under a name of its own); no
 * browser request from another origin; a POST must be application/json (a cross-site form cannot
 * send that without a preflight, never granted) of at most 4,096 bytes.
 */
@Component
public class ControlDoor extends OncePerRequestFilter {
  static final int MAX_BODY = 4096;
  private static final int MAX_SHOWN = 80;
  private static final Set<String> LOOPBACK_NAMES = Set.of("localhost", "127.0.0.1", "::1");
  private static final Pattern IPV4 = Pattern.compile("\\d{1,3}(\\.\\d{1,3}){3}");
  private static final Pattern CONTROL = Pattern.compile("[\\x00-\\x1f\\x7f]");

  private final Set<String> allowedHosts;

  public ControlDoor(ConsumerSettings settings) {
    this.allowedHosts = settings.allowedHosts();
  }

  @Override
  protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
      throws ServletException, IOException {
    String refusal = null;
    HttpStatus status = HttpStatus.BAD_REQUEST;
    String host = request.getHeader("Host");
    String origin = request.getHeader("Origin");
    String method = request.getMethod();
    if (!hostAllowed(host)) {
      refusal = "the Host " + cut(host == null ? "" : host) + " is not one this endpoint answers to";
    } else if ("cross-site".equals(request.getHeader("Sec-Fetch-Site")) || foreign(origin, host, request.getScheme())) {
      status = HttpStatus.FORBIDDEN;
      refusal = "refused: this request comes from another origin (" + cut(origin == null ? "" : origin) + ")";
    } else if (requestLineProblem(request)) {
      refusal = "the path or the query holds control characters or is not valid UTF-8";
    } else if (!Set.of("GET", "POST", "DELETE", "HEAD").contains(method)) {
      status = HttpStatus.METHOD_NOT_ALLOWED;
      refusal = "GET, POST or DELETE";
    } else if ("POST".equals(method) && !isJson(request.getContentType())) {
      status = HttpStatus.UNSUPPORTED_MEDIA_TYPE;
      refusal = "the body must be application/json";
    } else if ("POST".equals(method) && request.getContentLengthLong() > MAX_BODY) {
      status = HttpStatus.CONTENT_TOO_LARGE;
      refusal = "the body must be at most " + MAX_BODY + " bytes";
    }
    if (refusal == null) {
      chain.doFilter(request, response);
      return;
    }
    response.setStatus(status.value());
    response.setContentType("application/json");
    response.getWriter().write(Envelope.JSON.writeValueAsString(Map.of("error", refusal)));
  }

  private boolean hostAllowed(String header) {
    if (header == null || header.isBlank()) {
      return false;
    }
    String host = header.trim().toLowerCase(Locale.ROOT);
    String name;
    if (host.startsWith("[")) {
      name = host.contains("]") ? host.substring(1, host.indexOf(']')) : host;
    } else {
      name = host.chars().filter(c -> c == ':').count() == 1 ? host.substring(0, host.indexOf(':')) : host;
    }
    return LOOPBACK_NAMES.contains(name) || allowedHosts.contains(name) || IPV4.matcher(name).matches()
        || (name.contains(":") && name.matches("[0-9a-f:.]+"));
  }

  /** Another origin: another scheme, host or port (a page served over https is not this http endpoint). */
  private static boolean foreign(String origin, String host, String scheme) {
    if (origin == null) {
      return false;
    }
    try {
      URI parsed = URI.create(origin);
      String netloc = parsed.getRawAuthority() == null ? "" : parsed.getRawAuthority().toLowerCase(Locale.ROOT);
      return "null".equals(origin) || !netloc.equals(host == null ? "" : host.toLowerCase(Locale.ROOT))
          || !scheme.equalsIgnoreCase(parsed.getScheme() == null ? "" : parsed.getScheme());
    } catch (IllegalArgumentException unreadable) {
      return true;
    }
  }

  private static boolean requestLineProblem(HttpServletRequest request) {
    String raw = request.getRequestURI() + (request.getQueryString() == null ? "" : "?" + request.getQueryString());
    try {
      return CONTROL.matcher(URLDecoder.decode(raw.replace("+", "%2B"), StandardCharsets.UTF_8)).find()
          || raw.contains("%") && !validUtf8(raw);
    } catch (IllegalArgumentException malformed) {
      return true;
    }
  }

  private static boolean validUtf8(String raw) {
    try {
      ByteBuffer bytes = ByteBuffer.wrap(percentDecode(raw));
      StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT).decode(bytes);
      return true;
    } catch (CharacterCodingException | IllegalArgumentException invalid) {
      return false;
    }
  }

  private static byte[] percentDecode(String raw) {
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    for (int i = 0; i < raw.length(); i++) {
      char c = raw.charAt(i);
      if (c == '%' && i + 2 < raw.length()) {
        out.write(Integer.parseInt(raw.substring(i + 1, i + 3), 16));
        i += 2;
      } else {
        out.write(c);
      }
    }
    return out.toByteArray();
  }

  private static boolean isJson(String contentType) {
    return contentType != null
        && contentType.split(";")[0].trim().toLowerCase(Locale.ROOT).equals("application/json");
  }

  /** The body as a JSON object, or a refusal naming what is wrong with it. */
  static JsonNode readJson(byte[] raw) {
    byte[] bytes = raw == null || raw.length == 0 ? "{}".getBytes(StandardCharsets.UTF_8) : raw;
    if (bytes.length > MAX_BODY) {
      throw new ControlEndpoint.Refusal(HttpStatus.CONTENT_TOO_LARGE, "the body must be at most " + MAX_BODY + " bytes");
    }
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes)).toString();
    } catch (CharacterCodingException invalid) {
      throw new ControlEndpoint.Refusal(HttpStatus.BAD_REQUEST, "the body is not valid UTF-8");
    }
    JsonNode body = Envelope.JSON.readTree(text);
    if (body == null || !body.isObject()) {
      throw new ControlEndpoint.Refusal(HttpStatus.BAD_REQUEST, "body: must be an object");
    }
    String problem = textProblem(body, "body");
    if (problem != null) {
      throw new ControlEndpoint.Refusal(HttpStatus.BAD_REQUEST, problem);
    }
    return body;
  }

  private static String textProblem(JsonNode value, String where) {
    if (value.isString()) {
      String text = value.asString();
      if (text.codePoints().anyMatch(c -> c >= 0xD800 && c <= 0xDFFF)) {
        return where + " holds a lone UTF-16 surrogate";
      }
      return text.indexOf('\0') >= 0 ? where + " holds a NUL character" : null;
    }
    if (value.isObject()) {
      Iterator<Map.Entry<String, JsonNode>> fields = value.properties().iterator();
      while (fields.hasNext()) {
        Map.Entry<String, JsonNode> field = fields.next();
        String inKey = textProblem(Envelope.JSON.getNodeFactory().stringNode(field.getKey()), where + " (a key)");
        String problem = inKey != null ? inKey : textProblem(field.getValue(), where + "." + cut(field.getKey()));
        if (problem != null) {
          return problem;
        }
      }
    }
    if (value.isArray()) {
      for (int index = 0; index < value.size(); index++) {
        String problem = textProblem(value.get(index), where + "[" + index + "]");
        if (problem != null) {
          return problem;
        }
      }
    }
    return null;
  }

  /** A value as an error may show it: printable, and at most 80 characters. */
  static String cut(String value) {
    StringBuilder shown = new StringBuilder();
    value.codePoints().forEach(c -> {
      if (c < 0x20 || (c >= 0x7f && c <= 0x9f) || (c >= 0xD800 && c <= 0xDFFF)) {
        shown.append(String.format("\\u%04x", c));
      } else {
        shown.appendCodePoint(c);
      }
    });
    String text = shown.toString();
    return text.length() <= MAX_SHOWN ? text : text.substring(0, MAX_SHOWN) + "… (" + text.length() + " characters)";
  }
}
