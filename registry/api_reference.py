"""The API reference (docs/api.md), generated from the registry's OpenAPI document, so that it
cannot drift from the code: a test regenerates it and compares.

    python -m registry.api_reference > docs/api.md
"""

from __future__ import annotations

import sys
from typing import Any

HEADER = """# Registry API reference

Generated from the registry's OpenAPI document by `python -m registry.api_reference > docs/api.md`;
do not edit by hand. A running registry serves the same document at `/openapi.json` and an
interactive view at `/docs`. Every `/v1` endpoint needs `Authorization: Bearer <token>` (see
[security](security.md)); errors are `{"error": {"code", "message", "hint"}}`.
"""


def render(spec: dict[str, Any]) -> str:
    lines = [HEADER]
    by_tag: dict[str, list[tuple[str, str, dict]]] = {}
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            by_tag.setdefault((operation.get("tags") or ["other"])[0], []).append((path, method, operation))
    for tag in sorted(by_tag):
        lines.append(f"## {tag}\n")
        for path, method, operation in sorted(by_tag[tag], key=lambda item: (item[0], item[1])):
            lines += _operation(path, method, operation)
    lines.append("## Schemas\n")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += _schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def _operation(path: str, method: str, operation: dict) -> list[str]:
    lines = [f"### `{method.upper()} {path}`\n", f"**{operation.get('summary', '')}.**"]
    if operation.get("description"):
        lines.append(" ".join(operation["description"].split()))
    lines.append("")
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | type | required | description |", "| --- | --- | --- | --- | --- |"]
        for p in parameters:
            description = p.get("description", p.get("schema", {}).get("description", ""))
            lines.append(f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                         f"{'yes' if p.get('required') else 'no'} | {_text(description)} |")
        lines.append("")
    body = operation.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines.append(f"Body ({media}): {_type(content.get('schema', {}))}\n")
    responses = operation.get("responses", {})
    if responses:
        lines.append("Responses: " + "; ".join(
            f"{status} {_response_type(r) or r.get('description', '')}"
            for status, r in sorted(responses.items())) + "\n")
    return lines


def _response_type(response: dict) -> str:
    content: dict = next(iter(response.get("content", {}).values()), {})  # the first media type's
    return _type(content.get("schema", {}))


def _schema(name: str, schema: dict) -> list[str]:
    lines = [f"### {name}\n"]
    if schema.get("description"):
        lines.append(_text(schema["description"]) + "\n")
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
        for field, spec in properties.items():
            lines.append(f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                         f"{_text(spec.get('description', ''))} |")
        lines.append("")
    elif "enum" in schema:
        lines.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".\n")
    return lines


def _type(schema: dict) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            return " or ".join(t for t in (_type(s) for s in schema[combinator]) if t)
    kind = schema.get("type", "")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"map of {_type(schema['additionalProperties'])}"
    limits = [f"{label} {schema[key]}" for key, label in (
        ("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
        ("minLength", "min length"), ("maxLength", "max length")) if key in schema]
    if "enum" in schema:
        limits.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "pattern" in schema:
        limits.append(f"pattern `{schema['pattern']}`".replace("|", "\\|"))
    return kind + (f" ({'; '.join(limits)})" if limits else "")


def _text(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def main() -> None:
    from registry.app import create_app

    sys.stdout.write(render(create_app().openapi()))


if __name__ == "__main__":
    main()
