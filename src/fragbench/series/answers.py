"""Reading an answer text against the structured-output schema."""

from __future__ import annotations

import json
from typing import Any

import attrs


@attrs.frozen
class ParsedAnswer:
    parsed: bool
    answer: str | None
    citations: list[dict[str, str]] | None
    """[{"id": ..., "extract": ...}] as the model wrote them, in order."""
    error: str | None


def parse_answer(text: str | None) -> ParsedAnswer:
    """Parse `{"answer": str, "citations": [{"id": str, "extract": str}]}`, nothing more.

    Anything else (no text, not JSON, a missing or mistyped field, an extra field) is recorded as
    unparseable with the reason; the raw text is kept elsewhere.
    """
    if text is None or not text.strip():
        return ParsedAnswer(False, None, None, "no answer text")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        return ParsedAnswer(False, None, None, f"not JSON ({exc.msg} at {exc.pos})")
    except (ValueError, RecursionError):  # a model's text: a number too long, nesting too deep
        return ParsedAnswer(False, None, None, "not JSON (a number too long or nested too deep)")
    if not isinstance(data, dict) or set(data) != {"answer", "citations"}:
        return ParsedAnswer(False, None, None, "not an object with exactly answer and citations")
    if not isinstance(data["answer"], str) or not isinstance(data["citations"], list):
        return ParsedAnswer(False, None, None, "answer is not a string or citations not a list")
    citations = []
    for item in data["citations"]:
        if (not isinstance(item, dict) or set(item) != {"id", "extract"}
                or not all(isinstance(v, str) for v in item.values())):
            return ParsedAnswer(False, None, None,
                                "a citation is not {id: string, extract: string}")
        citations.append({"id": item["id"], "extract": item["extract"]})
    return ParsedAnswer(True, data["answer"], citations, None)
