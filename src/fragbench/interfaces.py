"""What registered plugins are, and the records that flow between the core and them.

Chunkers, scorers and measures work on whole Polars frames (many passages, many questions at
once): one Python call per chunk would not survive a corpus of millions of sentences.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    import polars as pl
else:
    from fragbench.lazy import polars as pl

CHUNK_COLUMNS: dict[str, tuple[str, ...]] = {
    "case": ("String",),
    "lang": ("String",),
    "variant": ("String",),
    "chunk": ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64"),
    "fact_ids": ("List(String)",),
    "text": ("String",),
}
"""What a sentence chunker returns: column -> the dtypes accepted (checked, naming the plugin)."""

INTEGER_DTYPES = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")

SPAN_COLUMNS: dict[str, tuple[str, ...]] = {
    "case": ("String",),
    "lang": ("String",),
    "variant": ("String",),
    "chunk": INTEGER_DTYPES,
    "start": INTEGER_DTYPES,
    "end": INTEGER_DTYPES,
}
"""What a span chunker (`output = "spans"`) returns; the core derives the rest."""

CHUNK_OUTPUTS = ("sentences", "spans")
"""What a chunker's optional `output` attribute may say; absent means "sentences"."""

SCORE_DTYPES = ("Float64", "Float32", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16",
                "UInt32", "UInt64")


def check_frame(frame: Any, columns: dict[str, tuple[str, ...]], who: str, what: str) -> None:
    """Refuse a plugin's output that breaks its documented columns, naming the plugin."""
    from fragbench.errors import PluginError

    if not isinstance(frame, pl.DataFrame):
        raise PluginError(f"{who} returned {type(frame).__name__}, not a Polars DataFrame; "
                          f"{what} (docs/plugins.md). Fix or uninstall that plugin.")
    missing = [c for c in columns if c not in frame.columns]
    wrong = [f"{c} is {frame.schema[c]}" for c, kinds in columns.items()
             if c in frame.columns and str(frame.schema[c]) not in kinds]
    if missing or wrong:
        problems = ([f"no column {', '.join(missing)}"] if missing else []) + wrong
        raise PluginError(f"{who} returned a frame with {'; '.join(problems)}; {what} "
                          "(docs/plugins.md). Fix or uninstall that plugin.")


@runtime_checkable
class Chunker(Protocol):
    """Cuts every passage into chunks, all passages at once.

    Two optional attributes, read with getattr so that a chunker written before they existed
    keeps working unchanged:

    - `output`: "sentences" (the default) or "spans", what `chunk` returns (below);
    - `overlap`: True when chunks may share sentences or characters (a sliding window). A
      chunker without it promises that its chunks, in chunk order, hold each sentence (or,
      for spans, each non-whitespace character of the passage) exactly once, in passage
      order; the test kit checks that promise (`fragbench.spans.coverage_problems`).
    """

    name: str

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        """Cut every passage into chunks.

        `sentences` has one row per sentence: case, lang, variant, position (0-based, passage
        order), fact_id, text, start, end (the sentence's character offsets in the passage's
        text, its sentences joined by one space; end exclusive). More columns may come in
        later versions: select the ones you use.

        Output "sentences": one row per chunk: case, lang, variant, chunk (0-based, in
        passage order), fact_ids (list, passage order), text (the sentences joined by one
        space).

        Output "spans": one row per chunk: case, lang, variant, chunk (0-based, in passage
        order), start, end (integers, 0 <= start < end <= the passage's length: the
        characters start..end-1 of the passage's text). The core derives text, fact_ids
        (every fact the span touches), whole_fact_ids and cut_fact_ids.
        """
        ...


@runtime_checkable
class Scorer(Protocol):
    name: str

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        """Return `chunks` with a Float64 `score` column (higher is better), rows in any order.

        `questions` has case, lang, question; a chunk is scored against the question of its
        (case, lang). Extra diagnostic columns are kept in the retrieval table.
        """
        ...


@attrs.frozen
class Request:
    """One planned call, as every backend receives it."""

    call_id: str
    lang: str
    instructions: str
    input: str
    """The user input text: source name, question and the supplied sentences with their IDs."""
    schema_name: str
    schema: dict[str, Any]
    question: str
    supplied: tuple[tuple[str, str], ...]
    """(fact ID, text shown) pairs in the order they are shown: the fact's sentence, or under a
    span chunker the characters of it that the selected chunk holds (a cut fact's fragment)."""


SNAPSHOT = r"-\d{4}-\d{2}-\d{2}"
"""A dated snapshot's suffix as OpenAI writes it (`gpt-6-astra-2026-09-30`): the default."""

COST_FIELDS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens")
"""The usage fields the cost formula reads (fragbench.budget.cost)."""


@attrs.frozen
class Usage:
    """Token counts as the provider reported them; None where a field was absent.

    In the core's terms, whatever the provider calls them: `input_tokens` is every input token
    of the request, cached and cache-write tokens included (a provider that reports them apart,
    as the Messages API does, adds them up); `cached_tokens` were read from a cache and
    `cache_write_tokens` written to one; `output_tokens` includes reasoning tokens, which
    `reasoning_tokens` details.
    """

    input_tokens: int | None
    cached_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None


@attrs.frozen
class Reply:
    """A response body that arrived and parsed as the provider's response object."""

    status: str
    """The provider's status: completed, incomplete, failed, cancelled, queued, in_progress."""
    model: str | None
    service_tier: str | None
    request_id: str | None
    usage: Usage | None
    text: str | None
    """The answer text (for structured output, the JSON text)."""
    refusal: str | None = None
    incomplete_reason: str | None = None
    error: str | None = None
    """The provider's own error message for a failed status."""
    raw: str | None = None
    """The response body as JSON text, never any header."""


class BackendFailure(Exception):
    """A technical failure: no usable response. The message must never hold a key or header.

    `never_sent=True` only where the request provably never left the machine (the connection
    was refused, the URL scheme is unsupported): the collector then releases the call's
    reservation. Anywhere else the server may have received and billed the request, and the
    reservation stays counted.
    """

    def __init__(self, kind: str, message: str, *, http_status: int | None = None,
                 raw: str | None = None, request_id: str | None = None,
                 never_sent: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.http_status = http_status
        self.raw = raw
        self.request_id = request_id
        self.never_sent = never_sent


class Session(Protocol):
    """One series' connection to a backend.

    Optional attributes the core uses when a session has them (a session built on
    `fragbench.transport.SDKSession` has all three, so an outside backend on it gets them
    without extra work):

    - `on_body: Callable[[str, int], None] | None`: set by the collector before each call;
      called with (the body as received, escaped where it is not valid UTF-8; the HTTP
      status) before anything parses it, so that what was paid for is journaled first.
    - `max_body_bytes: int`: set by the core from the frozen plan (`max_response_bytes`);
      a body larger than this after decompression is a technical failure.
    - `proxy: str | None`: the proxy the config named (never one from the environment),
      named in the pre-run line and in series.json.

    A backend may also define `check_environment(params) -> str`: what `open` would check
    (endpoint, key shape, certificates, proxy), sending nothing; `plan` shows its answer.
    """

    endpoint: str
    """Where requests go (a base URL, or a description for offline backends)."""

    def send(self, request: Request) -> Reply:
        """Send exactly one request; never retry. Raise BackendFailure on a technical failure."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Contract:
    """What a priced backend promises about a series, declared from its config parameters.

    The core budgets with these, never with a parameter name it guesses: the reservation
    prices `output_ceiling` output tokens, a usage above it is impossible, and the stop rules
    compare the model and tier that come back with `model` and `service_tier`.
    """

    model: str
    """The model the series asks for: a response from another one stops the series."""
    output_ceiling: int
    """The most output tokens (reasoning included) one call can bill: the backend sends it as
    the request's limit, under whatever name its API gives it."""
    usage_fields: frozenset[str]
    """The COST_FIELDS the provider has a concept of and reports. A field left out (no cache on
    a Chat Completions server) is priced as zero; a field declared here but missing from a
    response leaves the call's cost unknown, and the series stops."""
    service_tier: str | None = None
    """The tier a response must echo for the frozen prices to hold; None when the provider
    reports none."""
    snapshot: str = SNAPSHOT
    """How the provider names a dated snapshot of the model asked for (a regular expression
    for the suffix): a response naming `model` + a match is the same model. OpenAI writes
    `-YYYY-MM-DD`; the Messages API `-YYYYMMDD`."""

    def problems(self) -> list[str]:
        """What makes this contract unusable, in words; empty when it holds."""
        found = []
        if not isinstance(self.model, str) or not self.model:
            found.append("model must be a non-empty string")
        if not isinstance(self.output_ceiling, int) or isinstance(self.output_ceiling, bool) \
                or self.output_ceiling < 1:
            found.append(f"output_ceiling must be a positive integer, not "
                         f"{self.output_ceiling!r}")
        try:
            re.compile(self.snapshot)
        except (re.error, TypeError):
            found.append(f"snapshot must be a regular expression, not {self.snapshot!r}")
        fields = set(self.usage_fields) if isinstance(self.usage_fields, (set, frozenset)) \
            else None
        if fields is None:
            found.append("usage_fields must be a frozenset of field names")
        else:
            unknown = sorted(fields - set(COST_FIELDS))
            if unknown:
                found.append(f"usage_fields names {', '.join(unknown)}, not among "
                             f"{', '.join(COST_FIELDS)}")
            lacking = [f for f in ("input_tokens", "output_tokens") if f not in fields]
            if lacking:
                found.append(f"usage_fields must include {' and '.join(lacking)}")
        return found


@runtime_checkable
class Backend(Protocol):
    name: str
    is_model: bool
    """False for a baseline that is no model: it is labelled so wherever it appears."""
    label: str

    def check_params(self, params: dict[str, Any]) -> None:
        """Raise ValueError with one sentence when the config's parameters are unusable."""
        ...

    def contract(self, params: dict[str, Any]) -> Contract:
        """What a series with these (checked) parameters promises; see Contract. Required of a
        backend whose config has a pricing table; called at load, so `freeze`, `plan` and
        `run` all refuse a backend that cannot say it."""
        ...

    def open(self, params: dict[str, Any]) -> Session:
        """Build a session; raise fragbench.errors.FragbenchError when it cannot (e.g. no key)."""
        ...


@attrs.frozen
class MeasureInput:
    """The recorded tables a measure reads; it never calls anything."""

    facts: pl.DataFrame
    """case, lang, fact_id, text, is_condition."""
    retrieval: pl.DataFrame
    calls: pl.DataFrame | None
    """One row per planned call (calls.parquet); None where no series was collected."""
    main_setting: tuple[int, int] | None = None
    """(chunk_size, top_k) the calls use."""


@runtime_checkable
class Measure(Protocol):
    name: str
    kind: Literal["primary", "diagnostic"]

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        """Return table name -> frame; names are unique across measures."""
        ...
