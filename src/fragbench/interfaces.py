"""What registered plugins are, and the records that flow between the core and them.

Chunkers, scorers and measures work on whole Polars frames (many passages, many questions at
once): one Python call per chunk would not survive a corpus of millions of sentences.

The protocols (`Chunker`, `Scorer`, `Backend` with its `Session`, `Measure`) say what the core
calls and what it passes; the records (`Request`, `Reply`, `Usage`, `BackendFailure`,
`Contract`, `MeasureInput`) are what flows through those calls. Every registered object also
declares the plugin API it is written for, `api_version = "1.0"` (`fragbench.api`). The same
names are importable from `fragbench.api`, the plugin API's one import.
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
"""The integer dtypes a chunker may use for `chunk`, `start` and `end` (as Polars names them)."""

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
"""The dtypes a scorer's `score` column may have; the core casts it to Float64."""


def check_frame(frame: Any, columns: dict[str, tuple[str, ...]], who: str, what: str) -> None:
    """Refuse a plugin's output that breaks its documented columns, naming the plugin.

    `frame` must be a Polars DataFrame holding every column of `columns` (column -> the
    dtypes accepted, as Polars writes them); extra columns are allowed. Raises
    `fragbench.errors.PluginError` (one line: `who`, what is wrong, then `what`, the contract
    in words) otherwise."""
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
      order; the test kit checks that promise (`fragbench.retrieval.spans.coverage_problems`).
    """

    name: str
    """The name configs use (`chunker = "..."`): unique among chunkers, whoever registers it."""
    api_version: str
    """The plugin API it is written for, MAJOR.MINOR (`"1.0"`): the registry and every kit
    check refuse a missing one, or one this fragbench does not support
    (`fragbench.api.api_version_problem`, docs/plugins.md "Stability")."""

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
    """Scores every chunk of every passage against its passage's question, all at once.

    The core ranks each passage's chunks by score and selects the top-k (ties to the chunk
    that comes first in the passage, `fragbench.retrieval.passages`), so every scorer gets the same
    selection rule.

    **Exactness: scores are batch-consistent to the bit.** The same chunk, scored in any batch
    (alone, with its passage only, with the whole corpus at several chunk sizes) and with the
    rows in any order, must get the identical float. The core compares scores after rounding
    them to 12 decimals, and a last-bit difference can fall on either side of a rounding and
    flip a selection or a tie; the test kit (`fragbench.testing.check_scorer`) scores each
    passage alone and the rows reversed, and compares exactly. To meet it:

    - compute each chunk's score from that chunk's own row and its own passage's and
      question's rows only: per-passage quantities with window expressions,
      `pl.col(...).max().over("case", "lang", "variant", "chunk_size")`, never a sum, maximum
      or statistic over the whole frame (it changes with what else is in the batch);
    - avoid a summation whose order depends on the row order (a `sum().over(...)` after
      a shuffle can differ in the last bit): sort first, or sum integers (term counts) and
      divide once;
    - never divide by something that can be 0 (0/0 is NaN, x/0 is inf: a passage where no
      chunk holds a term of the question, a question with no term once stopwords are
      dropped): test the divisor and give such chunks 0.0. Scores must be finite numbers.
    """

    name: str
    """The name configs use (`scorer = "..."`): unique among scorers, whoever registers it."""
    api_version: str
    """The plugin API it is written for, MAJOR.MINOR (`"1.0"`): the registry and every kit
    check refuse a missing one, or one this fragbench does not support
    (`fragbench.api.api_version_problem`, docs/plugins.md "Stability")."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        """Return `chunks`, every row once with its columns unchanged, plus a numeric `score`
        column (Float64 best; any of SCORE_DTYPES, cast to Float64; higher is better), rows in
        any order. Extra columns (diagnostics) are kept in the retrieval table.

        `chunks` has one row per chunk of every passage at every chunk size of the experiment
        (several sizes in one call: tell them apart by `chunk_size`), with the columns the core
        derives for either kind of chunker: case, lang, variant (the passage), chunk (Int32,
        0-based, passage order), fact_ids, whole_fact_ids, cut_fact_ids (lists of fact IDs),
        text (the chunk's text: what to score), start, end (Int32: a span chunker's character
        offsets; null for a sentence chunker), and chunk_size (Int32, the size asked of the
        chunker); a sentence
        chunker's own extra columns come along too. More columns may come in later versions:
        select the ones you use.

        `questions` has one row per passage language: case, lang, question. A chunk is scored
        against the question of its (case, lang), whatever its variant and chunk size.

        The score must be batch-consistent to the bit (see the class's docstring).
        """
        ...


@attrs.frozen
class Request:
    """One planned call, as every backend receives it (`Session.send`): everything the
    request's body holds comes from here and the backend's config parameters."""

    call_id: str
    """The call's ID in the frozen plan's schedule (unique within a series)."""
    lang: str
    """The language code of the passage and question (`en`, `fr`, ...)."""
    instructions: str
    """The system instructions (the protocol's, in the call's language)."""
    input: str
    """The user input text: source name, question and the supplied sentences with their IDs."""
    schema_name: str
    """The name of the structured-output JSON schema (for APIs that name it)."""
    schema: dict[str, Any]
    """The JSON schema the answer must follow (structured output); send it as the API wants."""
    question: str
    """The question alone (also inside `input`), for a backend that needs it apart."""
    supplied: tuple[tuple[str, str], ...]
    """(fact ID, text shown) pairs in the order they are shown: the fact's sentence, or under a
    span chunker the characters of it that the selected chunk holds (a cut fact's fragment)."""


SNAPSHOT = r"-[0-9]{4}-[0-9]{2}-[0-9]{2}"
"""A dated snapshot's suffix as OpenAI writes it (`gpt-6-astra-2026-09-30`): the default. ASCII
digits only: `\\d` would also take Arabic-Indic (`٢٠٢٦`) or full-width (`２０２６`) digits, which
no provider writes, as a dated snapshot priced at the frozen rates."""

COST_FIELDS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens")
"""The usage fields the cost formula reads (fragbench.budget.money.cost): the only names allowed in
`Contract.usage_fields`, which must include input_tokens and output_tokens."""


@attrs.frozen
class Usage:
    """Token counts as the provider reported them; None where a field was absent.

    In the core's terms, whatever the provider calls them: `input_tokens` is every input token
    of the request, cached and cache-write tokens included (a provider that reports them apart,
    as the Messages API does, adds them up); `cached_tokens` were read from a cache and
    `cache_write_tokens` written to one; `output_tokens` includes reasoning tokens, which
    `reasoning_tokens` details (a reader whose API counts them apart adds them to the output,
    as the Gemini example in docs/adding-a-backend.md does). A usage that breaks these terms
    is one the request could not have produced (`fragbench.calls.collector.impossible`): reasoning
    above the output it is part of, or above the contract's output ceiling; a `total_tokens`
    other than input plus output. Its cost is then unknown (counted at the call's
    reservation) and the series stops.
    """

    input_tokens: int | None
    """Every input token of the request, cached and cache-write tokens included."""
    cached_tokens: int | None
    """Input tokens read from the provider's cache (a part of input_tokens)."""
    cache_write_tokens: int | None
    """Input tokens written to the provider's cache (a part of input_tokens)."""
    output_tokens: int | None
    """Every output token billed, reasoning (thinking) tokens included."""
    reasoning_tokens: int | None
    """Reasoning tokens (a part of output_tokens), shown apart; not priced separately."""
    total_tokens: int | None = None
    """The total the provider reports, where it reports one: input_tokens plus output_tokens.
    Optional (None: not reported, or not read; never priced); a reader that takes it lets the
    core check that the usage adds up. For a Responses API body the core reads
    `usage.total_tokens` itself when the reader left this None
    (`fragbench.transport.usage_places`)."""


@attrs.frozen
class Reply:
    """A response body that arrived and parsed as the provider's response object: what
    `Session.send` returns. Every string taken from the body is cleaned of lone surrogates
    (`fragbench.transport.text_or_none`); a field the body lacks is None, never guessed."""

    status: str
    """The provider's status: completed, incomplete, failed, cancelled, queued, in_progress."""
    model: str | None
    """The model the response names (checked against `Contract.model` and its snapshots)."""
    service_tier: str | None
    """The service tier the response names (checked against `Contract.service_tier`)."""
    request_id: str | None
    """The provider's request ID (from the response's header), or None: for support."""
    usage: Usage | None
    """The token counts reported; None when the body carries no usage (the cost is then
    unknown and the series stops)."""
    text: str | None
    """The answer text (for structured output, the JSON text)."""
    refusal: str | None = None
    """The model's refusal message, where the API reports one apart from the text."""
    incomplete_reason: str | None = None
    """Why an `incomplete` response stopped (e.g. `max_output_tokens`), as the API says it."""
    error: str | None = None
    """The provider's own error message for a failed status."""
    raw: str | None = None
    """The response body as JSON text, never any header."""


class BackendFailure(Exception):
    """A technical failure: no usable response. The message must never hold a key or header.

    Raised by `Session.send`; the collector records it (the call's `failure`, `http_status`,
    `error`, `request_id`, `raw` and `never_sent` in the journal and calls.parquet) and stops
    the series. `BackendFailure(kind, message, *, http_status=None, raw=None,
    request_id=None, never_sent=False)`:

    - `kind`: one word for what failed, as the built-in sessions say it: `timeout`,
      `connection`, `http_error`, `doubtful_response`, `too_large`, `bad_encoding`,
      `bad_body`, `repeated_key`, `bad_response`, `second_request`
      (`fragbench.transport.SDKSession` says what each means); a backend may use its own;
    - `message`: one sentence for the user, saying whether the server may have billed it;
    - `http_status`: the response's HTTP status, where one came back;
    - `raw`: the response body as received (never a header), where one came back;
    - `request_id`: the provider's request ID, where known;
    - `never_sent=True` only where the request provably never left the machine (the
      connection was refused, the URL scheme is unsupported): the collector then releases the
      call's reservation. Anywhere else the server may have received and billed the request,
      and the reservation stays counted. `fragbench.transport.connection_failure` builds the
      right one from an SDK's connection error.
    """

    def __init__(self, kind: str, message: str, *, http_status: int | None = None,
                 raw: str | None = None, request_id: str | None = None,
                 never_sent: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        """What failed, in one word (`timeout`, `connection`, `http_error`, ...)."""
        self.message = message
        """One sentence for the user; never a key or header."""
        self.http_status = http_status
        """The response's HTTP status, or None when no response came back."""
        self.raw = raw
        """The response body as received, or None; never a header."""
        self.request_id = request_id
        """The provider's request ID, or None."""
        self.never_sent = never_sent
        """True only where the request provably never left the machine (nothing billed)."""


class Session(Protocol):
    """One series' connection to a backend: what `Backend.open` returns.

    The core reads `endpoint`, calls `send` once per planned call, started in schedule order:
    one at a time, unless the backend's config sets `max_in_flight` above 1, when up to that
    many calls are sent at once, each from a thread of its own; and `close` once at the end.
    Optional attributes the core uses when a session has them (a session built on
    `fragbench.transport.SDKSession` or `JSONSession` has them all, so an outside backend on
    it gets them without extra work):

    - `on_body: Callable[[str, int], None] | None`: with one call in flight, set by the
      collector before each call; with more, set once. Called with (the body as received,
      escaped where it is not valid UTF-8; the HTTP status) before anything parses it, so
      that what was paid for is journaled first.
    - `concurrent: bool`: True declares that `send` may be called from several threads at
      once, and that `on_body` is read at each call and called from the thread that called
      `send`, before it returns (the collector tells calls apart by thread). Required for
      `max_in_flight > 1`: a session without it is refused before anything is written.
    - `max_body_bytes: int`: set by the core from the frozen plan (`max_response_bytes`);
      a body larger than this after decompression is a technical failure.
    - `proxy: str | None`: the proxy the config named (never one from the environment),
      named in the pre-run line and in series.json.

    A backend may also define `check_environment(params) -> str`: what `open` would check
    (endpoint, key shape, certificates, proxy), sending nothing; `plan` shows its answer.
    """

    endpoint: str
    """Where requests go (a base URL, or a description for offline backends), recorded in
    series.json and printed in the pre-run line: never a key, user-info or query
    (`fragbench.transport.public_url` gives the form that may be recorded)."""

    def send(self, request: Request) -> Reply:
        """Send exactly one request; never retry. Return the `Reply` for a response body that
        parsed as the provider's response object (its `status` says completed, incomplete,
        failed, ...); raise `BackendFailure` on a technical failure (no usable response: an
        HTTP error status, a timeout, a body of the wrong shape). Hand the body to `on_body`,
        when set, before parsing it."""
        ...

    def close(self) -> None:
        """Release the session's connections and clients: called once when the series ends
        (completed, stopped or interrupted), after the last `send`. It is skipped only when a
        call was abandoned past its deadline (the process ends soon after), so nothing the
        record needs may wait for it."""
        ...


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
    `-YYYY-MM-DD`; the Messages API `-YYYYMMDD`. The core matches it with `re.ASCII`
    (`fragbench.calls.collector.model_matches`), so `\\d` and `\\w` in it mean ASCII digits and
    letters only (a model name in other digits is another model); write `[0-9]` all the same."""

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
            # As `model_matches` uses it: after the model's name, with re.ASCII (an inline
            # global flag such as `(?i)` cannot stand there).
            if not isinstance(self.snapshot, str):
                raise TypeError
            re.compile(f"m({self.snapshot})?", re.ASCII)
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
    """Makes the calls of a series: checks its config parameters, states what a priced series
    promises (`contract`), and opens the `Session` that sends each request. docs/adding-a-
    backend.md is the worked example; `fragbench.testing.check_backend` runs the fault suite
    on one."""

    name: str
    """The name configs use (`plugin = "..."` of a backend): unique among backends."""
    api_version: str
    """The plugin API it is written for, MAJOR.MINOR (`"1.0"`): the registry and every kit
    check refuse a missing one, or one this fragbench does not support
    (`fragbench.api.api_version_problem`, docs/plugins.md "Stability")."""
    is_model: bool
    """False for a baseline that is no model: it is labelled so wherever it appears."""
    label: str
    """A human name for what answers (`OpenAI Responses API`, `extractive`): printed when a
    series starts and recorded in series.json, which reports and compare pages show."""

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
    """One row per fact of every passage language: case, lang, fact_id, text, is_condition
    (facts.parquet, docs/tables.md)."""
    retrieval: pl.DataFrame
    """The retrieval table (retrieval.parquet, docs/tables.md): every chunk of every passage
    at every (chunk_size, top_k) setting of the plan's sensitivity matrix, with its score,
    rank, selected and tied."""
    calls: pl.DataFrame | None
    """One row per planned call (calls.parquet); None where no series was collected."""
    main_setting: tuple[int, int] | None = None
    """(chunk_size, top_k) of the plan's main retrieval setting: the one whose selected
    chunks the calls were shown (`retrieval` holds every setting; filter it with this to
    read what the calls saw). `fragbench measure` and `run` always set it, from the frozen
    plan; None only where a MeasureInput is built without a plan (a test's own)."""


@runtime_checkable
class Measure(Protocol):
    """Computes tables from a series' recorded tables (`MeasureInput`), calling nothing, so
    that `fragbench measure` can recompute it at any time."""

    name: str
    """The name configs use (`measures = [...]`): unique among measures."""
    api_version: str
    """The plugin API it is written for, MAJOR.MINOR (`"1.0"`): the registry and every kit
    check refuse a missing one, or one this fragbench does not support
    (`fragbench.api.api_version_problem`, docs/plugins.md "Stability")."""
    kind: Literal["primary", "diagnostic"]
    """`primary`: pre-registered in the frozen plan, tables in the series folder;
    `diagnostic`: run on demand (`--diagnostic`), tables under `diagnostics/`."""
    tables: dict[str, dict[str, str]]
    """Every table `compute` may return: table name -> column -> Polars type, written as
    `fragbench.series.measure_tables.type_name` writes it (`"String"`, `"Int32"`, `"List(String)"`,
    `"Decimal(38, 18)"`), in column order. Strings, so that the plugin's module imports no
    Polars at start-up. `measure` and `run` refuse, before any table is written, a table that
    is not declared, other columns or types, or a money column (`*_usd`) that is not
    `Decimal(38, 18)`; a declared table may be absent (a series never collected)."""

    def compute(self, data: MeasureInput) -> dict[str, pl.DataFrame]:
        """Return table name -> frame, each written as `<name>.parquet`; names are unique
        across measures. The same input must give the same tables.

        Optional (API 1.1): an attribute `reads`, input table (`calls`, `retrieval`,
        `facts`) -> the column names of it that `compute` reads, all of them: `data` then
        holds each table with those columns alone (those the series has), a table not named
        with none, and the core need not hold the rest
        (`fragbench.series.measure_tables.reads_problem`). Without it, every table whole.

        Optional: a method `summary(tables) -> list[tuple[str, pl.DataFrame]]`, given the
        tables `compute` returned, gives the titled frames both reports show for a primary
        measure instead of the default (each table's first rows); the core renders them,
        redacted and escaped, and holds them to the same money and key-column rules."""
        ...
