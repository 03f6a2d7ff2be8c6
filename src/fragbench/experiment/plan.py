"""The frozen plan: everything that decides what is sent and what it may cost, with hashes.

`build_plan` computes the plan from the files and code as they are now; `freeze` writes it to
`experiment.json`; `verify` recomputes it and refuses when anything differs from what was
frozen. Only the `recorded` block (when it was frozen, on which Python) is left out of the
comparison, and freezing a plan that is still current leaves the file as it is, byte for byte.

The code is part of the plan: every plugin it uses is recorded with its distribution, version
and the sha256 of each of its files (`code_sha256`: see `fragbench.plugins.code_files`), so a
plugin whose code changed while its version did not is refused, naming the file. So is
fragbench's own code (`core`: its version, one sha256 over its files, and each file's sha256,
`fragbench.plugins.core_identity`): a collector, budget or wire that changed under the same
version string is named by `plan` and refused by `run`. Upgrading fragbench between freezing
and running is therefore a change like any other: review what `plan` names, then freeze again.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from fragbench import text
from fragbench.budget.money import reservation, usd
from fragbench.corpus.cases import sentences_frame
from fragbench.errors import PlanMismatch
from fragbench.experiment.config import BackendConfig, Experiment
from fragbench.experiment.requests import (
    build_request,
    request_sha256,
    request_sha256s,
    request_text,
    request_texts,
)
from fragbench.files import Plan, write_text_atomically
from fragbench.interfaces import Request
from fragbench.plugins import code_sha256, core_identity, describe, registry
from fragbench.retrieval.passages import retrieve
from fragbench.retrieval.spans import chunker_output, supplied

PLAN_FILE = "experiment.json"
PLAN_FORMAT = 1
PACKAGES = ("fragbench", "attrs", "openai", "pluggy", "polars", "typer")


@attrs.frozen
class PlannedCall:
    seq: int
    id: str
    case: str
    lang: str
    variant: str
    mode: str
    rep: int
    supplied_ids: tuple[str, ...]
    request: Request


def block_order(variants: tuple[str, ...], modes: tuple[str, ...]) -> list[tuple[str, str]]:
    """One block: every variant x mode once (balanced), the i-th pair being
    (variants[i mod V], modes[(i div V + i mod V) mod M]). The variants take turns in their
    order (A, B, A, B), so two neighbours in a block never share a variant; the modes cannot
    alternate as well (in four calls A and B each meet both modes once), so each turn of the
    variants shifts the modes by one: for A/B x retrieval/full, (A, retrieval), (B, full),
    (A, full), (B, retrieval). `schedule` rotates this order by one place from block to block
    (rotating): over V x M consecutive blocks each pair opens a block once and holds each
    place of the block once. With two variants, where two blocks meet the variant repeats
    and the mode changes (the first block ends (B, retrieval), the second opens (B, full)).
    No randomization."""
    nv, nm = len(variants), len(modes)
    return [(variants[i % nv], modes[(i // nv + i % nv) % nm]) for i in range(nv * nm)]


def schedule(experiment: Experiment, retrieval_table: Any) -> list[PlannedCall]:
    """The ordered calls. Blocks of one repetition x case x language, repetition outermost so
    that repetitions are spread in time; each block holds each variant x mode once, and the
    combination that opens a block rotates by one from block to block. Deterministic: no
    randomization is claimed.

    A retrieval call is given the selected chunks' facts (`fragbench.retrieval.spans.supplied`):
    whole sentences under a sentence chunker, and under a span chunker each touched fact's
    characters inside the span; a full call every sentence whole."""
    selected = supplied(retrieval_table, sentences_frame(experiment.cases,
                                                         list(experiment.languages)),
                        experiment.chunk_size, experiment.top_k)
    order = block_order(experiment.variants, experiment.modes)
    calls: list[PlannedCall] = []
    block = 0
    for rep in range(1, experiment.repetitions + 1):
        for case in experiment.cases:
            for lang in experiment.languages:
                start = block % len(order)
                for variant, mode in order[start:] + order[:start]:
                    if mode == "retrieval":
                        pairs = selected.get((case.id, lang, variant), [])
                        ids, texts = [f for f, _ in pairs], [t for _, t in pairs]
                    else:
                        ids, texts = list(case.variants[variant]), None
                    call_id = f"{case.id}-{lang}-{variant}-{mode}-r{rep}"
                    calls.append(PlannedCall(
                        seq=len(calls) + 1, id=call_id, case=case.id, lang=lang,
                        variant=variant, mode=mode, rep=rep, supplied_ids=tuple(ids),
                        request=build_request(experiment, case, lang, call_id, ids, texts),
                    ))
                block += 1
    return calls


def call_reservation(call: PlannedCall, backend: BackendConfig, experiment: Experiment,
                     text: str | None = None) -> Decimal:
    """What the call reserves from the budget under `backend`: zero for an unpriced backend.
    `text`: the call's `request_text`, when the caller has it."""
    if backend.pricing is None or backend.contract is None:
        return Decimal(0)
    text = request_text(call.request) if text is None else text
    return reservation(len(text.encode("utf-8")), backend.pricing,
                       backend.contract.output_ceiling, experiment.budget.framing_tokens)


def main_retrieval(experiment: Experiment) -> Any:
    reg = registry()
    return retrieve(experiment.cases, reg.get("chunker", experiment.chunker),
                    reg.get("scorer", experiment.scorer), experiment.settings,
                    list(experiment.languages))


def _rel(path: Path, base: Path) -> str:
    """Relative to the experiment folder, so the plan holds no machine-specific path."""
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def _backend_doc(b: BackendConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"plugin": b.plugin, "params": b.params, "draws_on_budget":
                           b.pricing is not None}
    if b.pricing:
        p = b.pricing
        doc["pricing"] = {
            "models": list(p.models), "per_tokens": p.per_tokens, "input": usd(p.input),
            "cached_input": None if p.cached_input is None else usd(p.cached_input),
            "cache_write": None if p.cache_write is None else usd(p.cache_write),
            "output": usd(p.output), "max_input_tokens": p.max_input_tokens,
            "read_on": p.read_on, "tier": p.tier, "currency": "USD",
        }
    concurrency = b.concurrency.doc()
    if concurrency is not None:  # left out at its default: protocol 1.0's plans stay as they are
        doc["concurrency"] = concurrency
    return doc


def schedule_entry(call: PlannedCall, reserved: Decimal, spans: bool,
                   text: str | None = None, sha256: str | None = None) -> dict[str, Any]:
    """One call of the plan's schedule. Under a span chunker (`spans`) the entry also lists the
    text shown for each supplied ID (`supplied_texts`: a cut fact's fragment), so that the
    measures check citations against what was given; a sentence chunker's entry leaves it out
    (each ID was shown its whole sentence), so its plan is what it was before spans existed.
    `text` and `sha256`: the call's `request_text` and `request_sha256`, when the caller has
    them."""
    entry: dict[str, Any] = {
        "seq": call.seq, "id": call.id, "case": call.case, "lang": call.lang,
        "variant": call.variant, "mode": call.mode, "rep": call.rep,
        "supplied_ids": list(call.supplied_ids)}
    if spans:
        entry["supplied_texts"] = [text for _, text in call.request.supplied]
    entry.update({
        "request_sha256": request_sha256(call.request) if sha256 is None else sha256,
        "request_bytes": len((request_text(call.request) if text is None else text)
                             .encode("utf-8")),
        "reserved_usd": usd(reserved)})
    return entry


def build_plan(experiment: Experiment, calls: list[PlannedCall] | None = None) -> dict[str, Any]:
    """The plan as a JSON-ready dict, computed from the files and code as they are now."""
    reg = registry()
    chunker = reg.get("chunker", experiment.chunker)
    spans = chunker_output(chunker, describe("chunker", chunker)) == "spans"
    base = experiment.dir
    calls = calls if calls is not None else schedule(experiment, main_retrieval(experiment))
    default = experiment.backends[experiment.default_backend]
    texts = request_texts([c.request for c in calls])
    hashes = request_sha256s([c.request for c in calls])
    reserved = [call_reservation(c, default, experiment, t) for c, t in zip(calls, texts,
                                                                             strict=True)]
    budget = experiment.budget
    available = budget.ceiling_usd - budget.prior_spend_usd
    used_plugins = [("chunker", experiment.chunker), ("scorer", experiment.scorer)]
    used_plugins += [("measure", m) for m in experiment.measures]
    used_plugins += [("backend", b.plugin) for b in experiment.backends.values()]
    files = [("config", experiment.config_path, experiment.config_sha256)]
    # Each corpus file once: a TOML case's file, or each file of a columnar folder.
    corpus_files = dict.fromkeys(f for c in experiment.cases for f in c.read_files)
    files += [("corpus", path, digest) for path, digest in corpus_files]
    files += [("prompt", p.path, p.sha256) for p in experiment.prompts.values()]
    files += [("schema", experiment.schema_path, experiment.schema_sha256)]
    packages = {}
    # The SDK a backend plugin declares (`packages`) is frozen with the core's: a series on
    # another provider records that provider's client version too.
    declared = [getattr(reg.get("backend", b.plugin), "packages", ())
                for b in experiment.backends.values()]
    for name in dict.fromkeys([*PACKAGES, *(n for names in declared for n in names)]):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = "not installed"
    return {
        "format": PLAN_FORMAT,
        "experiment": experiment.id,
        "files": [{"role": role, "path": _rel(path, base), "sha256": digest}
                  for role, path, digest in files],
        "parameters": {
            "languages": list(experiment.languages),
            "variants": list(experiment.variants),
            "modes": list(experiment.modes),
            "repetitions": experiment.repetitions,
            "retrieval": {"chunker": experiment.chunker, "scorer": experiment.scorer,
                          "chunk_size": experiment.chunk_size, "top_k": experiment.top_k},
            "sensitivity": {"chunk_sizes": list(experiment.sensitivity_chunk_sizes),
                            "top_ks": list(experiment.sensitivity_top_ks)},
            "measures": list(experiment.measures),
            "schema_name": experiment.schema_name,
            "schema": experiment.schema,
            "max_response_bytes": experiment.max_response_bytes,
            # Only when the config names its own: a plan frozen without them reads the same.
            **({"limits": list(experiment.limits)} if experiment.limits is not None else {}),
        },
        "corpus": [{"id": c.id, "path": _rel(c.path, base), "sha256": c.sha256,
                    "license": c.license, "conditions": list(c.conditions),
                    "variants": {k: list(v) for k, v in c.variants.items()}}
                   for c in experiment.cases],
        "prompts": {lang: {"path": _rel(p.path, base), "sha256": p.sha256,
                           "instructions": p.instructions, "input": p.input_template,
                           "sentence": p.sentence_template}
                    for lang, p in experiment.prompts.items()},
        "tokenization": text.TOKENIZATION_RULE,
        "stopwords": {lang: list(words) for lang, words in text.STOPWORDS.items()},
        "plugins": [{"kind": kind, "name": name, "origin": reg.entry(kind, name).origin,
                     "version": reg.entry(kind, name).version,
                     "code_sha256": code_sha256(kind, reg.get(kind, name))}
                    for kind, name in used_plugins],
        "packages": packages,
        "core": core_identity(),
        "backends": {name: _backend_doc(b) for name, b in experiment.backends.items()},
        "default_backend": experiment.default_backend,
        "budget": {
            "id": budget.id,
            "ceiling_usd": usd(budget.ceiling_usd),
            "prior_spend_usd": usd(budget.prior_spend_usd),
            "balance_usd": usd(available),
            "framing_tokens": budget.framing_tokens,
            "reserved_for": experiment.default_backend,
            "total_reservation_usd": usd(sum(reserved, Decimal(0))),
            "fits": sum(reserved, Decimal(0)) <= available,
        },
        "schedule": [schedule_entry(c, r, spans, t, h)
                     for c, r, t, h in zip(calls, reserved, texts, hashes, strict=True)],
    }


def plan_path(experiment: Experiment) -> Path:
    return experiment.dir / PLAN_FILE


def dumps(plan: dict[str, Any]) -> str:
    """The plan as experiment.json holds it: indented two spaces, but each scheduled call on
    one line of its own. A call a line reads as well in a review's diff, and the file stays
    a line per call at 100,000 calls; and only the sections are written by json's indenting
    encoder, which is Python code, while the calls go through its C encoder (at 100,000 calls
    the indented whole took some 15 s of the freeze)."""
    items = list(plan.items())
    lines = ["{"]
    for n, (key, value) in enumerate(items, start=1):
        if key == "schedule" and isinstance(value, list) and value:
            calls = ",\n".join("    " + json.dumps(entry, ensure_ascii=False) for entry in value)
            text = f"[\n{calls}\n  ]"
        else:
            # json escapes every newline inside a string: each newline here is the layout's.
            text = json.dumps(value, ensure_ascii=False, indent=2).replace("\n", "\n  ")
        lines.append(f"  {json.dumps(key, ensure_ascii=False)}: {text}"
                     + ("," if n < len(items) else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


@attrs.frozen
class Frozen:
    path: Path
    written: bool
    """False when the plan frozen there was still current: the file was left untouched."""


def freeze(experiment: Experiment) -> Frozen:
    """Write experiment.json, atomically (a crash leaves the old file or the new one).

    Idempotent: when the file already holds this very plan (its `recorded` block aside), it is
    left byte for byte as it was, so its hash, which each series records, stays the same; a
    changed plan is written whole with a new `recorded` block."""
    plan = build_plan(experiment)
    path = plan_path(experiment)
    if path.is_file():
        try:
            current = not drift(_read_frozen(path), plan, experiment.dir)
        except PlanMismatch:  # unreadable: replaced by the plan as it is now
            current = False
        if current:
            return Frozen(path, written=False)
    plan["recorded"] = {"frozen_at": datetime.now(UTC).isoformat(timespec="seconds"),
                        "python": platform.python_version()}
    write_text_atomically(path, dumps(plan))
    return Frozen(path, written=True)


def _first_difference(old: Any, new: Any, where: str = "") -> str | None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                return f"{where}{key}"
            found = _first_difference(old[key], new[key], f"{where}{key}.")
            if found:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            found = _first_difference(a, b, f"{where}{i}.")
            if found:
                return found
        return None if len(old) == len(new) else f"{where}length"
    return None if old == new else where.rstrip(".")


def differences(frozen: Any, now: dict[str, Any], base: Path | None = None) -> list[str]:
    """What differs between a frozen plan and the plan the files and code give now, in words a
    person can act on: each changed file by name (under `base`, the experiment folder, when
    given), each changed package or plugin version, then the sections of the plan that
    differ."""
    if not isinstance(frozen, dict):
        return ["it is not a plan (not a JSON object)"]
    found: list[str] = []

    def files(plan: dict[str, Any]) -> dict[str, str]:
        entries = plan.get("files") if isinstance(plan.get("files"), list) else []
        return {str(f.get("path")): str(f.get("sha256")) for f in entries if isinstance(f, dict)}

    for path, change in _hash_changes(files(frozen), files(now)):
        name = os.path.normpath(base / path) if base is not None else path
        found.append(f"{name} {_FILE_SAID[change]}")
    old_packages = frozen.get("packages") if isinstance(frozen.get("packages"), dict) else {}
    for name in list(now["packages"]) + [n for n in old_packages if n not in now["packages"]]:
        if old_packages.get(name) != now["packages"].get(name):
            found.append(f"package {name} is {now['packages'].get(name, 'not recorded')}, the "
                         f"plan froze {old_packages.get(name, 'nothing')}")

    found += _core_differences(frozen, now)
    found += _plugin_differences(frozen, now)
    sections = [key for key in list(now) + [k for k in frozen if k not in now]
                if key not in ("files", "packages", "core", "plugins", "recorded")
                and frozen.get(key) != now.get(key)]
    if sections and found:
        found.append(f"which changes the plan's {', '.join(sections)}")
    elif sections:
        for key in sections:
            where = _first_difference(frozen.get(key), now.get(key), key + ".")
            found.append(f"{key} differs (at {where})")
    if not found and frozen != now:  # e.g. a file entry whose role alone changed
        found.append(f"the plan differs (at {_first_difference(frozen, now)})")
    return found


def _core_differences(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each of fragbench's own files whose hash differs (by its path in the package), in
    words; one line for a plan frozen before the core was recorded. Its version is said with
    the packages'."""
    old, new = frozen.get("core"), now["core"]
    if old == new:
        return []
    if not isinstance(old, dict) or not isinstance(old.get("code_sha256"), dict):
        return ["fragbench's own code: the plan froze no hash of it (an earlier fragbench "
                "froze it)"]
    # No file changed: only the version can differ, which the packages' line says (a block
    # edited by hand otherwise is still out of date: `differences` names where).
    return [f"fragbench's own file {file} {_SAID[change]} since the plan was frozen"
            for file, change in _hash_changes(old["code_sha256"], new["code_sha256"])]


def _plugin_differences(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each plugin whose distribution or version differs, else each of its files whose hash
    differs (by its path in the package), in words."""
    def plugins(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
        entries = plan.get("plugins") if isinstance(plan.get("plugins"), list) else []
        return {f"{p.get('kind')} {p.get('name')}": p for p in entries if isinstance(p, dict)}

    def release(entry: dict[str, Any] | None) -> str | None:
        return None if entry is None else f"{entry.get('origin')} {entry.get('version')}"

    found = []
    old_plugins, new_plugins = plugins(frozen), plugins(now)
    for name in list(new_plugins) + [n for n in old_plugins if n not in new_plugins]:
        old, new = old_plugins.get(name), new_plugins.get(name)
        if old is None or new is None or release(old) != release(new):
            found.append(f"plugin {name} is {release(new) or 'not used'}, the plan froze "
                         f"{release(old) or 'none'}")
            continue
        old_code, new_code = old.get("code_sha256"), new.get("code_sha256")
        if old_code == new_code:
            continue
        who = f"plugin {name} ({release(new)})"
        if not isinstance(old_code, dict) or not isinstance(new_code, dict):
            found.append(f"{who}: the plan froze no hash of its code")
            continue
        found += [f"{who}: file {file} {_SAID[change]} since the plan was frozen"
                  for file, change in _hash_changes(old_code, new_code)]
    return found


_SAID = {"gone": "is gone", "new": "is new", "changed": "changed"}
_FILE_SAID = {"gone": "is no longer used", "new": "is new",
              "changed": "changed since the plan was frozen"}


def _hash_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, gone | new | changed) for each name whose hash differs: the old plan's names in
    their order, then the new ones."""
    changes = []
    for name in list(old) + [n for n in new if n not in old]:
        if name not in new:
            changes.append((name, "gone"))
        elif name not in old:
            changes.append((name, "new"))
        elif old[name] != new[name]:
            changes.append((name, "changed"))
    return changes


def drift(frozen: Any, now: dict[str, Any], base: Path) -> list[str]:
    """What differs between a frozen plan (its `recorded` block aside: when, on which Python)
    and the plan the files and code give now; empty when the frozen plan is current."""
    stored = {k: v for k, v in frozen.items() if k != "recorded"} if isinstance(frozen, dict) \
        else frozen
    return [] if stored == now else differences(stored, now, base)


def _read_frozen(path: Path) -> Plan:
    """The frozen plan and the hash of the bytes it was read from (`Plan`)."""
    try:
        data = path.read_bytes()
        value = json.loads(data.decode("utf-8"))
        if not isinstance(value, dict):
            raise ValueError(f"a JSON {type(value).__name__}, not an object")
        return Plan.parsed(data, value)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ones
        raise PlanMismatch(f"{path}: unreadable frozen plan ({exc}); restore it from version "
                           "control or freeze again.") from None


def verify(experiment: Experiment) -> tuple[Plan, list[PlannedCall], Any]:
    """Recompute the plan; refuse unless it equals the frozen one. Returns the frozen plan, the
    calls and the retrieval table (so that nothing is computed twice)."""
    path = plan_path(experiment)
    if not path.exists():
        raise PlanMismatch(f"{path}: no frozen plan; run `fragbench freeze {experiment.dir}` "
                           "and commit experiment.json before collecting.")
    frozen = _read_frozen(path)
    table = main_retrieval(experiment)
    calls = schedule(experiment, table)
    now = build_plan(experiment, calls)
    found = drift(frozen, now, experiment.dir)
    if found:
        shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
        raise PlanMismatch(
            f"{path}: the frozen plan is out of date: {shown}; restore what changed, or freeze "
            f"a new plan deliberately (`fragbench freeze {experiment.dir}`) and commit it "
            "before collecting."
        )
    return frozen, calls, table


def endpoint(cfg: BackendConfig) -> dict[str, Any]:
    """What a backend says of the endpoint it would use, sending nothing: its
    `check_environment(params)` (optional) returns a one-line description, or raises a
    FragbenchError saying why it is not usable. `usable` is None when the backend has no such
    method; a plugin that fails otherwise is shown as not usable, naming the plugin."""
    from fragbench.errors import FragbenchError, first_line

    backend = registry().get("backend", cfg.plugin)
    check = getattr(backend, "check_environment", None)
    if not callable(check):
        return {"usable": None, "description": None, "problem": None}
    try:
        said = check(dict(cfg.params))
    except FragbenchError as exc:
        return {"usable": False, "description": None, "problem": first_line(exc)}
    except Exception as exc:  # a plugin's bug: shown in one line naming it, never a traceback
        return {"usable": False, "description": None,
                "problem": f"{describe('backend', backend)} failed: {type(exc).__name__}: "
                           f"{first_line(exc)}; fix or uninstall that plugin"}
    if not isinstance(said, str) or not said.strip():
        return {"usable": False, "description": None,
                "problem": f"{describe('backend', backend)} returned {type(said).__name__} "
                           "from check_environment(), not a one-line description; fix or "
                           "uninstall that plugin"}
    return {"usable": True, "description": said.strip().splitlines()[0], "problem": None}


def review(experiment: Experiment, backend: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan as the files give it now, and what a person reviews before a run: one backend's
    reservations and endpoint (`endpoint`), the budget's balance from its ledger, where that
    ledger is kept and how many records it holds (`ledger`: a budget spent from two stores is
    counted twice, so the store is shown), and whether the frozen plan is current (naming
    what changed). Reads only: sends nothing, creates no ledger."""
    from fragbench.budget.money import balance
    from fragbench.budget.stores import ledger_for
    from fragbench.errors import UsageError

    name = backend or experiment.default_backend
    if name not in experiment.backends:
        raise UsageError(f"--backend {name}: {experiment.config_path} has no such backend; "
                         f"the backends are {', '.join(experiment.backends)}.")
    cfg = experiment.backends[name]
    calls = schedule(experiment, main_retrieval(experiment))
    doc = build_plan(experiment, calls)
    texts = request_texts([c.request for c in calls])
    reserved = [call_reservation(c, cfg, experiment, t) for c, t in zip(calls, texts,
                                                                         strict=True)]
    total = sum(reserved, Decimal(0))
    budget_info = ledger_info = None
    if cfg.pricing is not None:
        b = experiment.budget
        ledger = ledger_for(b).load()  # the file store, or the server FRAGBENCH_LEDGER_URL names
        recorded = ledger.spent()
        left = balance(b, recorded)
        budget_info = {"id": b.id, "ceiling_usd": usd(b.ceiling_usd),
                       "prior_spend_usd": usd(b.prior_spend_usd), "recorded_usd": usd(recorded),
                       "balance_usd": usd(left), "fits": total <= left, "ledger": ledger.where}
        ledger_info = {"store": ledger.store, "path": ledger.where, "exists": ledger.exists(),
                       "records": ledger.records, "series": len(ledger.series)}
    path = plan_path(experiment)
    if not path.exists():
        frozen_info = {"path": str(path), "current": False,
                       "differences": ["there is no frozen plan yet: run `fragbench freeze`"]}
    else:
        found = drift(_read_frozen(path), doc, experiment.dir)
        frozen_info = {"path": str(path), "current": not found, "differences": found}
    info = {"backend": name, "draws_on_budget": cfg.pricing is not None,
            "reserved_usd": [usd(r) for r in reserved], "total_reservation_usd": usd(total),
            "endpoint": endpoint(cfg), "budget": budget_info, "ledger": ledger_info,
            "frozen_plan": frozen_info}
    return doc, info
