"""The experiment config (`experiments/<name>/config.toml`) and what it points to.

Validated at the boundary: a malformed config, a missing prompt or an unknown plugin name stops
here with one sentence naming the file and the fault, before anything runs or is written.

Every key is one fragbench reads: a key it does not know (a typo such as `repetitons`, or
`top_k` under `[sensitivity]`) is refused, with the nearest known key, never ignored, since an
ignored typo in a pre-registered plan silently becomes a default. The keys are listed below
(`TOP_KEYS`, `TABLE_KEYS`, `PRICING_KEYS`, `PROMPT_KEYS`, `CONCURRENCY_KEYS`); a backend table's
other keys are the backend's parameters, which its `check_params` refuses when it does not know
them.
"""

from __future__ import annotations

import codecs
import datetime
import hashlib
import json
import string
import tomllib
from decimal import Context, Decimal, Inexact, InvalidOperation
from pathlib import Path
from typing import Any

import attrs

from fragbench.budget.money import Budget, Pricing
from fragbench.columns import MONEY_SCALE, PLAIN_AMOUNT
from fragbench.corpus.cases import Case, load_corpus
from fragbench.errors import ConfigError, FragbenchError, PluginError
from fragbench.files import file_name_problem
from fragbench.http.limits import MAX_BODY_BYTES
from fragbench.interfaces import Contract
from fragbench.suggest import unknown
from fragbench.toml_types import type_mismatch

MODES = ("retrieval", "full")

DEFAULT_MAX_RESPONSE_BYTES = MAX_BODY_BYTES
"""A response body's size bound after decompression when the config sets none (4 MiB)."""
MAX_RESPONSE_BYTES_RANGE = (64 * 1024, 64 * 1024 * 1024)
"""What `max_response_bytes` may be set to (64 KiB to 64 MiB): below, a long answer with its
usage would not fit; above, one hostile body could fill memory and the journal."""

TOP_KEYS = ("id", "title", "design_date", "corpus", "languages", "variants", "modes",
            "repetitions", "measures", "default_backend", "max_response_bytes", "retrieval",
            "sensitivity", "prompts", "backends", "budget", "limits")
"""The keys of a config's top level. `title` and `design_date` are for the reader: they are
frozen with the config's hash, and change nothing else. `limits` is the experiment's own list
of what its results cannot show, stated by every report of its series (frozen in the plan);
without it a report states `fragbench.report.data.LIMITS`, which hold for any experiment."""
MAX_LIMITS = 20
"""At most this many `limits`, each at most MAX_LIMIT_CHARS: a report's list, not a document."""
MAX_LIMIT_CHARS = 1000
TABLE_KEYS = {
    "retrieval": ("chunker", "scorer", "chunk_size", "top_k"),
    "sensitivity": ("chunk_sizes", "top_ks"),
    "budget": ("id", "ceiling_usd", "prior_spend_usd", "framing_tokens"),
}
PROMPTS_KEYS = ("schema", "schema_name")
"""`[prompts]` holds these and one prompt file per language of `languages`."""
PRICING_KEYS = ("read_on", "tier", "models", "per_tokens", "input", "cached_input",
                "cache_write", "output", "max_input_tokens")
PROMPT_KEYS = ("instructions", "input", "sentence")
"""The keys of a prompt file."""
CONCURRENCY_KEYS = ("max_in_flight", "requests_per_minute", "tokens_per_minute")
"""The keys of a backend table that fragbench reads itself (how many calls go at once, and
the provider's rate limits the starts are paced under); never handed to the backend."""
MAX_IN_FLIGHT = 256
"""The most calls a backend may have in flight: each is a thread and an open connection."""
MAX_PER_MINUTE = 10**9
"""The largest rate limit accepted: far beyond any provider's, so that an extra zero or three
is caught before the plan is frozen."""
@attrs.frozen
class Concurrency:
    """How a backend's calls go out (`[backends.NAME]`: `max_in_flight`, `requests_per_minute`,
    `tokens_per_minute`), frozen in the plan when set (`doc`). The default, one call at a
    time with no pacing, is protocol 1.0's, and leaves the plan as it was."""

    max_in_flight: int = 1
    """How many calls may be in flight at once (1 to MAX_IN_FLIGHT); above 1 the session must
    declare `concurrent = True` (`fragbench.calls.collector.concurrency_problem`)."""
    requests_per_minute: int | None = None
    """No more calls than this start in any sliding minute."""
    tokens_per_minute: int | None = None
    """The calls started in any sliding minute bound at most this many tokens, each call
    counted at its whole bound (input bytes plus framing tokens, plus the output ceiling)."""

    def doc(self) -> dict[str, int] | None:
        """What the plan records: None at the default (a plan that sets nothing is unchanged),
        else every key that is set."""
        if self == Concurrency():
            return None
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


@attrs.frozen
class BackendConfig:
    name: str
    plugin: str
    params: dict[str, Any]
    pricing: Pricing | None
    """Set for a billed backend: it draws on the experiment's budget."""
    contract: Contract | None = None
    """What the backend declares for these parameters; set whenever `pricing` is."""
    concurrency: Concurrency = Concurrency()
    """How many calls go at once, and at what pace (`Concurrency`)."""


@attrs.frozen
class Prompt:
    lang: str
    path: Path
    instructions: str
    input_template: str
    """Formatted with source, question and sentences."""
    sentence_template: str
    """Formatted with id and text, one per supplied sentence, joined by newlines."""
    sha256: str


@attrs.frozen
class Experiment:
    id: str
    dir: Path
    config_path: Path
    config_sha256: str
    cases: list[Case]
    languages: tuple[str, ...]
    variants: tuple[str, ...]
    modes: tuple[str, ...]
    repetitions: int
    chunker: str
    scorer: str
    chunk_size: int
    top_k: int
    sensitivity_chunk_sizes: tuple[int, ...]
    sensitivity_top_ks: tuple[int, ...]
    measures: tuple[str, ...]
    prompts: dict[str, Prompt]
    schema_name: str
    schema: dict[str, Any]
    schema_path: Path
    schema_sha256: str
    backends: dict[str, BackendConfig]
    default_backend: str
    budget: Budget
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """The largest response body a call accepts, after decompression: a larger one is a
    technical failure, counted at its reservation (frozen in the plan)."""
    limits: tuple[str, ...] | None = None
    """The experiment's own limits (`limits` in config.toml), or None: its reports then state
    the general ones."""

    @property
    def settings(self) -> list[tuple[int, int]]:
        """Every (chunk_size, top_k) of the sensitivity matrix; the main one is among them."""
        return [(s, k) for s in self.sensitivity_chunk_sizes for k in self.sensitivity_top_ks]


class _Reader:
    """Typed access to a TOML table with errors that name the file and the key."""

    def __init__(self, path: Path, data: dict[str, Any], prefix: str = "") -> None:
        self.path, self.data, self.prefix = path, data, prefix

    def fail(self, key: str, message: str) -> ConfigError:
        where = f"{self.prefix}{key}".rstrip(".")  # the table itself when key is ""
        return ConfigError(f"{self.path}: {where} {message}; fix the config and run again.")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise self.fail(key, "is missing")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.fail(key, type_mismatch(f"{self.prefix}{key}", value, kind))
        return value

    def text(self, key: str, default: Any = ...) -> str:
        value = self.get(key, str, default)
        if isinstance(value, str) and not value.strip():
            raise self.fail(key, "is empty")
        return value

    def count(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        value = self.get(key, int, default)
        if value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        return value

    def money(self, key: str) -> Decimal:
        value = self.get(key, (int, float, str))
        # Decimal() also reads other scripts' digits ("١٠", "１０"), "1_0", spaces and
        # exponents in a string: an amount is written with 0-9, maybe a point and decimals.
        plain = not isinstance(value, str) or PLAIN_AMOUNT.fullmatch(value) is not None
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            raise self.fail(key, f"is not a number ({value!r})") from None
        if not plain:
            raise self.fail(key, f"must be written with the digits 0-9, maybe a point and "
                            f"decimals (\"12.50\"), not {value!r}")
        if not amount.is_finite() or amount < 0:
            raise self.fail(key, f"must be a non-negative amount, got {value!r}")
        return amount

    def texts(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not value or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be a non-empty list of names")
        if len(set(value)) != len(value):
            raise self.fail(key, "repeats a name")
        return tuple(value)

    def counts(self, key: str) -> tuple[int, ...]:
        value = self.get(key, list)
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                for v in value):
            raise self.fail(key, "must be a non-empty list of positive integers")
        if len(set(value)) != len(value):
            raise self.fail(key, "repeats a value")
        return tuple(value)

    def table(self, key: str) -> _Reader:
        return _Reader(self.path, self.get(key, dict), f"{self.prefix}{key}.")


def _unknown_keys(path: Path, data: dict[str, Any]) -> None:
    """Refuse, in one line naming the file, every key of a config that fragbench does not
    read, each with the nearest known key (in its own table, else in another one: `chunk_size`
    at the top level suggests `retrieval.chunk_size`). Runs before anything else is read, so
    that a misspelt key is reported as such rather than as the correct key missing. The
    `[prompts]` table, whose keys depend on `languages`, is checked when it is read."""
    everywhere = [*TOP_KEYS, *(f"{t}.{k}" for t, keys in TABLE_KEYS.items() for k in keys),
                  *(f"prompts.{k}" for k in PROMPTS_KEYS)]
    found: list[str] = []

    def check(table: Any, known: tuple[str, ...], prefix: str) -> None:
        if isinstance(table, dict):
            found.extend(unknown(k, known, prefix, everywhere) for k in table if k not in known)

    check(data, TOP_KEYS, "")
    for name, keys in TABLE_KEYS.items():
        check(data.get(name), keys, f"{name}.")
    backends = data.get("backends")
    for name, table in backends.items() if isinstance(backends, dict) else ():
        if isinstance(table, dict):
            check(table.get("pricing"), PRICING_KEYS, f"backends.{name}.pricing.")
    if found:
        raise _refusal(path, found)


def _refusal(path: Path, found: list[str]) -> ConfigError:
    keys = "unknown key" if len(found) == 1 else "unknown keys"
    return ConfigError(f"{path}: {keys} {'; '.join(found)}: fragbench reads no such key (an "
                      "ignored typo would become a default); fix the config and run again.")


def _read_toml(path: Path, error: type[FragbenchError]) -> tuple[dict[str, Any], bytes]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror}); check the path.") from None
    if raw.startswith(codecs.BOM_UTF8):
        raise error(f"{path}: starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 "
                    "without BOM and run again.")
    try:
        return tomllib.loads(raw.decode("utf-8")), raw
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{path}: is not valid TOML ({exc}); fix the file and run again.") from None


def _load_prompt(path: Path, lang: str) -> Prompt:
    data, raw = _read_toml(path, ConfigError)
    extra = [unknown(k, PROMPT_KEYS) for k in data if k not in PROMPT_KEYS]
    if extra:
        raise _refusal(path, extra)
    reader = _Reader(path, data)
    prompt = Prompt(
        lang=lang,
        path=path,
        instructions=reader.text("instructions"),
        input_template=reader.text("input"),
        sentence_template=reader.text("sentence"),
        sha256=hashlib.sha256(raw).hexdigest(),
    )
    for key, template in (("input", prompt.input_template),
                          ("sentence", prompt.sentence_template)):
        if (problem := placeholder_problem(template, PLACEHOLDERS[key])) is not None:
            raise reader.fail(key, problem)
    return prompt


PLACEHOLDERS = {"input": ("source", "question", "sentences"), "sentence": ("id", "text")}
"""The placeholders each template of a prompt file may hold (`requests.build_request` fills
them)."""


def placeholder_problem(template: str, fields: tuple[str, ...]) -> str | None:
    """Why `template` cannot be filled with `fields` (words after the key: the placeholder
    met and the valid ones), or None. Only plain `{name}` placeholders (a format spec such as
    `{text:>20}` allowed); `{{` and `}}` write a brace."""
    valid = ", ".join(f"{{{f}}}" for f in fields)
    guide = f"the placeholders it may hold are {valid} (write {{{{ or }}}} for a brace)"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"has a malformed placeholder ({exc}); {guide}"
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        shown = repr("{" + name[:40] + ("..." if len(name) > 40 else "") + "}")
        if name not in fields:
            return f"has the placeholder {shown}, which fragbench does not fill; {guide}"
        if spec and "{" in spec:  # a width taken from the text itself: it fails at a call
            return f"has a placeholder inside {shown}'s format spec; {guide}"
    try:
        template.format(**{f: "" for f in fields})
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        return f"has a malformed placeholder ({exc}); {guide}"
    return None


def _exact_per_token(reader: _Reader, pricing: Pricing) -> None:
    """Refuse, before anything is spent, a price whose per-token amount cannot be written
    exactly in MONEY_SCALE decimals (e.g. per_tokens = 3): costs are sums of whole tokens
    times these amounts, so they are exact whenever these are."""
    context = Context(prec=80, traps=[Inexact])
    for name in ("input", "cached_input", "cache_write", "output"):
        if getattr(pricing, name) is None:
            continue
        try:
            per_token = context.divide(getattr(pricing, name), Decimal(pricing.per_tokens))
        except Inexact:
            per_token = None
        step = Decimal(1).scaleb(-MONEY_SCALE)
        if per_token is None or per_token.quantize(step, context=Context(prec=80)) != per_token:
            raise reader.fail(name, f"per {pricing.per_tokens} tokens gives a per-token price "
                              f"that is not exact in {MONEY_SCALE} decimals; state prices "
                              "per a power of ten of tokens")


def _load_pricing(reader: _Reader) -> Pricing:
    pricing = _pricing(reader)
    _exact_per_token(reader, pricing)
    return pricing


def _pricing(reader: _Reader) -> Pricing:
    return Pricing(
        models=reader.texts("models"),
        input=reader.money("input"),
        cached_input=reader.money("cached_input") if "cached_input" in reader.data else None,
        cache_write=reader.money("cache_write") if "cache_write" in reader.data else None,
        output=reader.money("output"),
        per_tokens=reader.count("per_tokens"),
        max_input_tokens=reader.count("max_input_tokens"),
        read_on=reader.text("read_on"),
        tier=reader.text("tier"),
    )


def _contract(backend: Any, params: dict[str, Any], where: str) -> Contract:
    """The backend's declared contract for a priced series, or one line saying what is wrong
    with it, naming the plugin: the budget is never computed from a guessed parameter."""
    from fragbench.plugins import describe

    who = describe("backend", backend)
    guide = "(docs/adding-a-backend.md); fix or uninstall that plugin"
    method = getattr(backend, "contract", None)
    if not callable(method):
        raise PluginError(f"{where}: {who} declares no contract(params): a backend with a "
                          "pricing table must say its model, output-token ceiling and usage "
                          f"fields {guide}.")
    try:
        contract = method(dict(params))
    except Exception as exc:  # a plugin's failure is one line naming it, never a traceback
        raise PluginError(f"{where}: {who} could not state its contract from these parameters "
                          f"({type(exc).__name__}: {exc}) {guide}.") from None
    if not isinstance(contract, Contract):
        raise PluginError(f"{where}: {who} returned {type(contract).__name__} from contract(), "
                          f"not a fragbench.interfaces.Contract {guide}.")
    problems = contract.problems()
    if problems:
        raise PluginError(f"{where}: {who} declares an unusable contract: "
                          f"{'; '.join(problems)} {guide}.")
    return contract


def _concurrency(table: _Reader, pricing: Pricing | None) -> Concurrency:
    """A backend table's concurrency keys, checked: each refused in one line naming it."""
    def bounded(key: str, high: int) -> int | None:
        if key not in table.data:
            return None
        value = table.count(key)
        if value > high:
            raise table.fail(key, f"must be at most {high}, got {value}")
        return value

    in_flight = bounded("max_in_flight", MAX_IN_FLIGHT)
    tokens = bounded("tokens_per_minute", MAX_PER_MINUTE)
    if tokens is not None and pricing is None:
        # A call's token bound needs the output ceiling of a priced backend's contract.
        raise table.fail("tokens_per_minute", "needs a pricing table: a call's token bound "
                         "counts the output ceiling of the backend's contract, which only a "
                         "priced backend declares")
    return Concurrency(max_in_flight=1 if in_flight is None else in_flight,
                       requests_per_minute=bounded("requests_per_minute", MAX_PER_MINUTE),
                       tokens_per_minute=tokens)


def _resolve(base: Path, relative: str) -> Path:
    return (base / relative).resolve()


def load_experiment(path: Path) -> Experiment:
    """Read an experiment folder (or its config.toml) and everything it names, validated.

    Plugin names are checked against the registry; the corpus is loaded and checked against the
    languages and variants the config asks for.
    """
    from fragbench.plugins import registry

    config_path = path / "config.toml" if path.is_dir() else path
    if not config_path.exists():
        raise ConfigError(f"{config_path}: no such experiment config; point to an experiment "
                          "folder that holds config.toml.")
    data, raw = _read_toml(config_path, ConfigError)
    _unknown_keys(config_path, data)
    base = config_path.parent
    r = _Reader(config_path, data)
    experiment_id = r.text("id")
    if (problem := file_name_problem(experiment_id)) is not None:  # before anything is read
        raise r.fail("id", f"{problem} (it names the folder OUT/<id> its series are "
                     "written in)")
    r.text("title", None)
    r.get("design_date", (str, datetime.date), None)
    max_response_bytes = r.get("max_response_bytes", int, DEFAULT_MAX_RESPONSE_BYTES)
    low, high = MAX_RESPONSE_BYTES_RANGE
    if not low <= max_response_bytes <= high:
        raise r.fail("max_response_bytes", f"must be between {low} and {high} bytes (64 KiB "
                     f"and 64 MiB), got {max_response_bytes}")

    corpus_paths = [_resolve(base, p) for p in r.texts("corpus")]
    cases = load_corpus(corpus_paths)
    languages = r.texts("languages")
    variants = r.texts("variants")
    for case in cases:
        for lang in languages:
            if lang not in case.langs:
                raise ConfigError(f"{case.path}: has no [{lang}] passage, which {config_path} asks "
                                  "for; add it or remove the language from the config.")
        for variant in variants:
            if variant not in case.variants:
                raise ConfigError(f"{case.path}: has no variant {variant}, which {config_path} "
                                  "asks for; add it or remove the variant from the config.")
    modes = r.texts("modes")
    for mode in modes:
        if mode not in MODES:
            raise r.fail("modes", f"names {mode!r}; the modes are {', '.join(MODES)}")

    plugins = registry()
    retrieval = r.table("retrieval")
    chunker = retrieval.text("chunker")
    scorer = retrieval.text("scorer")
    plugins.get("chunker", chunker, where=f"{config_path}: retrieval.chunker")
    plugins.get("scorer", scorer, where=f"{config_path}: retrieval.scorer")
    chunk_size, top_k = retrieval.count("chunk_size"), retrieval.count("top_k")
    sensitivity = r.table("sensitivity")
    sizes, top_ks = sensitivity.counts("chunk_sizes"), sensitivity.counts("top_ks")
    if chunk_size not in sizes or top_k not in top_ks:
        raise r.fail("retrieval", "names a main setting that is not one of the sensitivity matrix "
                     "(the main setting must be published among all the others)")
    measures = r.texts("measures")
    for name in measures:
        plugins.get("measure", name, where=f"{config_path}: measures")

    prompt_table = r.table("prompts")
    extra = [unknown(k, (*PROMPTS_KEYS, *languages), "prompts.") for k in prompt_table.data
             if k not in (*PROMPTS_KEYS, *languages)]
    if extra:
        raise _refusal(config_path, extra)
    prompts = {}
    for lang in languages:
        prompts[lang] = _load_prompt(_resolve(base, prompt_table.text(lang)), lang)
    schema_path = _resolve(base, prompt_table.text("schema"))
    try:
        schema_raw = schema_path.read_bytes()
        schema = json.loads(schema_raw)
    except OSError as exc:
        raise ConfigError(f"{schema_path}: cannot be read ({exc.strerror}); check prompts.schema "
                          f"in {config_path}.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{schema_path}: is not valid JSON ({exc}); fix the schema file."
        ) from None
    if not isinstance(schema, dict):
        raise ConfigError(f"{schema_path}: must hold a JSON object (a JSON schema).")

    backends: dict[str, BackendConfig] = {}
    backend_tables = r.get("backends", dict)
    if not backend_tables:
        raise r.fail("backends", "must define at least one backend")
    for name in backend_tables:
        table = r.table("backends").table(name)
        plugin = table.text("plugin")
        backend = plugins.get("backend", plugin, where=f"{config_path}: backends.{name}.plugin")
        params = {k: v for k, v in table.data.items()
                  if k not in ("plugin", "pricing", *CONCURRENCY_KEYS)}
        try:
            backend.check_params(params)
        except ValueError as exc:
            raise table.fail("", f"is unusable: {exc}") from None
        pricing = _load_pricing(table.table("pricing")) if "pricing" in table.data else None
        if backend.is_model and pricing is None:
            raise table.fail("pricing", "is missing: a model backend draws on the budget and "
                             "needs its pricing table")
        contract = _contract(backend, params, f"{config_path}: backends.{name}") \
            if pricing is not None else None
        if pricing is not None and contract is not None:
            for field, rate in (("cached_tokens", "cached_input"),
                                ("cache_write_tokens", "cache_write")):
                if field in contract.usage_fields and getattr(pricing, rate) is None:
                    raise table.table("pricing").fail(rate, f"is missing: backend {plugin} "
                                                      f"reports {field.replace('_', ' ')}")
        backends[name] = BackendConfig(name=name, plugin=plugin, params=params, pricing=pricing,
                                       contract=contract, concurrency=_concurrency(table, pricing))
    default_backend = r.text("default_backend")
    if default_backend not in backends:
        raise r.fail("default_backend", f"names {default_backend!r}, which is not among the "
                     f"backends ({', '.join(backends)})")

    b = r.table("budget")
    budget = Budget(
        id=b.text("id"),
        ceiling_usd=b.money("ceiling_usd"),
        prior_spend_usd=b.money("prior_spend_usd"),
        framing_tokens=b.count("framing_tokens", minimum=0),
    )
    if (problem := file_name_problem(budget.id)) is not None:
        raise b.fail("id", f"{problem} (it names the budget's ledger file)")
    if budget.prior_spend_usd > budget.ceiling_usd:
        raise b.fail("prior_spend_usd", "is above the ceiling")

    return Experiment(
        id=experiment_id,
        dir=base,
        config_path=config_path,
        config_sha256=hashlib.sha256(raw).hexdigest(),
        cases=cases,
        languages=languages,
        variants=variants,
        modes=modes,
        repetitions=r.count("repetitions"),
        chunker=chunker,
        scorer=scorer,
        chunk_size=chunk_size,
        top_k=top_k,
        sensitivity_chunk_sizes=sizes,
        sensitivity_top_ks=top_ks,
        measures=measures,
        prompts=prompts,
        schema_name=prompt_table.text("schema_name"),
        schema=schema,
        schema_path=schema_path,
        schema_sha256=hashlib.sha256(schema_raw).hexdigest(),
        backends=backends,
        default_backend=default_backend,
        budget=budget,
        max_response_bytes=max_response_bytes,
        limits=_limits(r),
    )


def _limits(r: _Reader) -> tuple[str, ...] | None:
    """`limits`: a list of sentences, each non-empty and at most MAX_LIMIT_CHARS, at most
    MAX_LIMITS of them; absent, None."""
    value = r.get("limits", list, None)
    if value is None:
        return None
    if not value or len(value) > MAX_LIMITS or not all(
            isinstance(v, str) and v.strip() and len(v) <= MAX_LIMIT_CHARS for v in value):
        raise r.fail("limits", f"must be a list of 1 to {MAX_LIMITS} sentences, each non-empty "
                     f"and at most {MAX_LIMIT_CHARS} characters")
    return tuple(v.strip() for v in value)
