"""Hypothesis strategies for requests to the platform's HTTP services: drawn from each route's own
schema (OpenAPI for the FastAPI services, the request models for the control endpoint), with
hostile values mixed in at every level: non-finite and huge numbers, numbers as strings and
booleans, NUL bytes, lone UTF-16 surrogates, control characters, very long strings, invalid
UTF-8, wrong JSON types, empty and blank idempotency keys.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_from_bytes

from hypothesis import strategies as st

SchemaDoc = dict[str, Any]
MAX_URL_VALUE = 2_000
"""Bytes of one value in a URL: servers refuse longer request lines before any route sees them."""


def examples(default: int) -> int:
    """Examples per route: `default` in `make test`, more with EO_PROPERTY_EXAMPLES=N for a long hunt."""
    return int(os.environ.get("EO_PROPERTY_EXAMPLES") or default)


HOSTILE_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "\t",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udfff",
            "\u202e\u0000",
            "\x1b[31m",
            "\r\n",
            "NaN",
            "Infinity",
            "1e309",
            "-1",
            "0",
            "true",
            "null",
            "'; DROP TABLE outbox; --",
            "%00",
            "../../etc/passwd",
            "é" * 300,
            "A" * 70_000,
            "🙂" * 100,
        ]
    ),
    st.text(st.characters(exclude_categories=()), max_size=40),
)
"""Strings no service should choke on: surrogates included (st.text leaves them out by default)."""

HOSTILE_NUMBERS = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 10**30, -(10**30), 2**63, 2**64, -0.0, 1e308, 0.5]),
    st.booleans(),
    st.integers(),
    st.floats(),
)

HOSTILE_VALUES: st.SearchStrategy[Any] = st.one_of(
    HOSTILE_TEXT,
    HOSTILE_NUMBERS,
    st.none(),
    st.lists(st.one_of(HOSTILE_TEXT, HOSTILE_NUMBERS), max_size=3),
    st.dictionaries(HOSTILE_TEXT, st.one_of(HOSTILE_TEXT, HOSTILE_NUMBERS), max_size=3),
)


def from_schema(
    schema: SchemaDoc, components: SchemaDoc, hostile: bool = True, depth: int = 0
) -> st.SearchStrategy[Any]:
    """Values that fit `schema` (JSON Schema as OpenAPI and pydantic write it), with a hostile
    value in place of any of them when `hostile`."""
    valid = _valid(schema, components, hostile, depth)
    return st.one_of(valid, HOSTILE_VALUES) if hostile else valid


def _valid(schema: SchemaDoc, components: SchemaDoc, hostile: bool, depth: int) -> st.SearchStrategy[Any]:
    if depth > 6:
        return st.none()
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _valid(components[name], components, hostile, depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(part, components, hostile, depth + 1) for part in schema[key]])
    if "allOf" in schema:
        return _valid(schema["allOf"][0], components, hostile, depth + 1)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_valid({**schema, "type": one}, components, hostile, depth) for one in kind])
    if kind == "string" and schema.get("examples"):
        return st.one_of(
            st.sampled_from(schema["examples"]), _valid({**schema, "examples": []}, components, hostile, depth)
        )
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= 300)
        low = schema.get("minLength", 0)
        return st.text(min_size=low, max_size=max(low, min(schema.get("maxLength", 40), 40)))
    if kind == "integer":
        low = schema.get("minimum", schema["exclusiveMinimum"] + 1 if "exclusiveMinimum" in schema else None)
        high = schema.get("maximum", schema["exclusiveMaximum"] - 1 if "exclusiveMaximum" in schema else None)
        return st.integers(low, high)
    if kind == "number":
        return st.floats(
            schema.get("minimum", schema.get("exclusiveMinimum")),
            schema.get("maximum", schema.get("exclusiveMaximum")),
            allow_nan=False,
            allow_infinity=False,
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = from_schema(schema.get("items", {}), components, hostile, depth + 1)
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", 4), 4)))
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        part = {name: from_schema(sub, components, hostile, depth + 1) for name, sub in properties.items()}
        return st.fixed_dictionaries(
            {name: value for name, value in part.items() if name in required},
            optional={name: value for name, value in part.items() if name not in required},
        )
    return HOSTILE_VALUES if hostile else st.none()


def encode_json(value: Any) -> bytes:
    """As a careless or hostile client sends it: NaN and Infinity as bare words, surrogates escaped."""
    return json.dumps(value, allow_nan=True).encode()


BODIES_OF_BYTES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b'{"a": "\xff"}', b"\xef\xbb\xbf{}", b"[" * 5000, b'{"x": 1e99999}', b"{", b"null", b"[]"]),
)


def as_path_segment(value: Any) -> str:
    """A value as one percent-encoded path segment (bytes that are not UTF-8 included)."""
    if isinstance(value, bytes):
        raw = value
    else:
        text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
        raw = text.encode("utf-8", "surrogatepass")
    return quote_from_bytes(raw[:MAX_URL_VALUE], safe="") or "%20"


PATH_SEGMENTS = st.one_of(HOSTILE_TEXT, HOSTILE_NUMBERS, st.binary(min_size=1, max_size=8))


def header_value(value: Any) -> bytes:
    """A header value as bytes on the wire: no CR, LF or NUL (no server can receive those)."""
    text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
    raw = text.encode("utf-8", "surrogatepass")
    return bytes(b for b in raw if b not in (0, 10, 13))[:MAX_URL_VALUE]


@dataclass
class Operation:
    method: str
    path: str
    """With {placeholders}."""
    parameters: list[SchemaDoc] = field(default_factory=list)
    body: SchemaDoc | None = None

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def operations(openapi: SchemaDoc) -> list[Operation]:
    """Every operation an OpenAPI document describes."""
    found = []
    for path, item in openapi.get("paths", {}).items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "delete", "patch"):
                continue
            content: dict[str, Any] = (operation.get("requestBody") or {}).get("content", {})
            first: dict[str, Any] = next(iter(content.values()), {})
            body = first.get("schema")
            found.append(Operation(method.upper(), path, list(operation.get("parameters", [])), body))
    return found


@dataclass
class Drawn:
    method: str
    url: str
    headers: dict[str, bytes]
    content: bytes | None


def requests_for(operation: Operation, components: SchemaDoc, extra_fields: SchemaDoc | None = None) -> Any:
    """A strategy of requests to `operation`: its parameters and body from its schema with hostile
    values mixed in; sometimes raw bytes or a wrong content type. `extra_fields` (JSON Schema of an
    object) stands in for a body the route reads by hand."""

    @st.composite
    def draw_request(draw: Any) -> Drawn:
        path = operation.path
        query: list[tuple[bytes, bytes]] = []
        headers: dict[str, bytes] = {}
        for parameter in operation.parameters:
            schema = parameter.get("schema", {})
            where, name = parameter["in"], parameter["name"]
            if where == "path":
                value = draw(st.one_of(_valid(schema, components, False, 0), PATH_SEGMENTS))
                path = path.replace("{" + name + "}", as_path_segment(value))
            elif where == "query" and draw(st.booleans()):
                value = draw(from_schema(schema, components))
                text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
                query.append((name.encode(), text.encode("utf-8", "surrogatepass")[:MAX_URL_VALUE]))
            elif where == "header":
                value = draw(st.one_of(st.none(), st.sampled_from(["", " ", "   "]), from_schema(schema, components)))
                if value is not None:
                    headers[name.replace("_", "-")] = header_value(value)
        if draw(st.booleans()):
            query.append(
                (draw(st.sampled_from([b"limit", b"x", b"%00"])), draw(st.sampled_from([b"%00", b"%FF", b"1"])))
            )
        url = path + ("?" + "&".join(f"{quote_from_bytes(k)}={quote_from_bytes(v)}" for k, v in query) if query else "")
        content: bytes | None = None
        schema = operation.body or extra_fields
        if operation.method in ("POST", "PUT", "PATCH"):
            shape = draw(st.sampled_from(["schema", "schema", "schema", "bytes", "form"]))
            if shape == "schema" and schema is not None:
                content = encode_json(draw(from_schema(schema, components)))
                headers["content-type"] = b"application/json"
            elif shape == "form" and schema is not None:
                value = draw(from_schema(schema, components, hostile=False))
                pairs = value.items() if isinstance(value, dict) else []
                content = "&".join(
                    f"{quote_from_bytes(str(k).encode())}={as_path_segment(v)}" for k, v in pairs
                ).encode()
                headers["content-type"] = b"application/x-www-form-urlencoded"
            else:
                content = draw(BODIES_OF_BYTES)
                headers["content-type"] = draw(st.sampled_from([b"application/json", b"text/plain"]))
        return Drawn(operation.method, url, headers, content)

    return draw_request()
