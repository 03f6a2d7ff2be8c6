"""Built-in backend `extractive`: an offline reference that is no model.

It answers with the supplied sentences that share a term (the retrieval rule's terms) with the
question, in the order supplied, and cites each of them whole, exactly as shown (under a span
chunker, a cut fact's fragment). It costs nothing, sends nothing
anywhere, and is labelled as a non-model baseline wherever it appears: its results are never a
model's.
"""

from __future__ import annotations

import json
from typing import Any

from fragbench.hookspecs import hookimpl
from fragbench.interfaces import Reply, Request, Usage
from fragbench.text import terms

MODEL_NAME = "extractive-baseline"


class ExtractiveSession:
    endpoint = "offline (no request leaves the machine)"

    def send(self, request: Request) -> Reply:
        texts = [text for _, text in request.supplied]
        question, *sentences = terms([request.question, *texts], request.lang)
        wanted = set(question)
        chosen = [(fid, text) for (fid, text), words in zip(request.supplied, sentences,
                                                            strict=True)
                  if wanted.intersection(words)]
        answer = {
            "answer": " ".join(text for _, text in chosen),
            "citations": [{"id": fid, "extract": text} for fid, text in chosen],
        }
        body = json.dumps(answer, ensure_ascii=False)
        return Reply(
            status="completed",
            model=MODEL_NAME,
            service_tier=None,
            request_id=None,
            usage=Usage(0, 0, 0, 0, 0),
            text=body,
            raw=json.dumps({"backend": "extractive", "output_text": body}, ensure_ascii=False),
        )

    def close(self) -> None:
        return None


class ExtractiveBackend:
    name = "extractive"
    api_version = "1.0"
    is_model = False
    label = "extractive"

    def check_params(self, params: dict[str, Any]) -> None:
        if params:
            raise ValueError(f"the extractive backend takes no parameters, got {sorted(params)}")

    def open(self, params: dict[str, Any]) -> ExtractiveSession:
        return ExtractiveSession()


@hookimpl
def register_backends(register: Any) -> None:
    register(ExtractiveBackend())
