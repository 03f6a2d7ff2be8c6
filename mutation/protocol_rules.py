"""Issue 18's protocol-rule mutants, each applied alone to a copy, against the test that kills it.

Usage, from the root of a disposable copy (it rewrites src/ files and restores them):
    .venv/bin/python mutation/protocol_rules.py --in-a-copy [--only SUBSTRING]

Issue 18 listed ten small, plausible bugs in clause-critical code that survived the whole suite,
and three that a test had killed only by accident. Each is one textual replacement here, run
against the test of `tests/test_protocol_clauses.py` written for it (from the protocol's
wording). The script first runs those tests unmutated (they must pass), then each mutant (its
test must fail), and prints one line per mutant: KILLED or SURVIVED, file, what it does, test,
then the first line pytest marked `E` (why it failed).

`PYTHONPATH` is set to the copy's `src` and `plugins/*/src`, so the copy is what runs even where
`.venv` is a link to another checkout's environment with fragbench and its workspace plugins
installed editable from there; the script checks that each is imported from the copy first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = "tests/test_protocol_clauses.py"

# (file, what the mutant does, old text, new text, test that must fail)
MUTANTS = [
    ("src/fragbench/builtin/citations.py", "extract stripped of surrounding whitespace",
     'found = pl.col("text").str.contains(pl.col("extract"), literal=True)',
     'found = pl.col("text").str.contains(pl.col("extract").str.strip_chars(), literal=True)',
     "test_whitespace_the_sentence_does_not_hold_makes_an_extract_not_verbatim"),
    ("src/fragbench/builtin/citations.py", "extract NFC-normalised before matching",
     'found = pl.col("text").str.contains(pl.col("extract"), literal=True)',
     'found = pl.col("text").str.contains(pl.col("extract").str.normalize("NFC"), '
     'literal=True)',
     "test_a_decomposed_accent_is_not_verbatim_at_the_exact_level"),
    ("src/fragbench/builtin/citations.py", "conditions_cited_validly from the folded level",
     'pl.col("id").filter(pl.col("valid") & pl.col("_cond").fill_null(False))',
     'pl.col("id").filter(pl.col("valid_folded") & pl.col("_cond").fill_null(False))',
     "test_a_condition_valid_only_at_the_typographic_level_is_not_cited_validly"),
    ("src/fragbench/calls/collector.py", "per-call fit counts the current call only",
     "for c in calls[index:]),", "for c in calls[index:index + 1]),",
     "test_before_each_call_everything_still_planned_must_fit"),
    ("src/fragbench/calls/collector.py", "a response with no service tier accepted",
     "if asked_tier is not None and reply.service_tier != asked_tier:",
     "if asked_tier is not None and reply.service_tier is not None "
     "and reply.service_tier != asked_tier:",
     "test_a_response_that_names_no_service_tier_is_an_unknown_cost"),
    ("src/fragbench/budget/ledger.py", "first record: another prior spend accepted",
     "if ceiling != b.ceiling_usd or prior != b.prior_spend_usd:",
     "if ceiling != b.ceiling_usd:",
     "test_a_config_with_another_prior_spend_on_the_same_budget_is_refused"),
    ("src/fragbench/builtin/openai_backend.py",
     "Responses usage: absent input_tokens_details read as zeros",
     "    usage, inp, out = blocks\n",
     '    usage, inp, out = blocks\n    inp = inp or {"cached_tokens": 0, '
     '"cache_write_tokens": 0}\n',
     "test_a_responses_usage_without_input_token_details_is_an_unknown_cost"),
    ("src/fragbench/report/compare.py", "cells whose requests differ are compared",
     "         & same_request).fill_null(False)", "         ).fill_null(False)",
     "test_compare_never_compares_cells_whose_requests_differ"),
    ("src/fragbench/builtin/scorers.py", "question terms joined on case only, across languages",
     'QUERY = ["case", "lang"]', 'QUERY = ["case"]',
     "test_question_terms_are_those_of_the_passage_s_own_question"),
    ("src/fragbench/retrieval/passages.py", "tie rounding to 3 decimals instead of 12",
     "TIE_DECIMALS = 12", "TIE_DECIMALS = 3",
     "test_two_distinct_scores_a_thousandth_apart_do_not_tie"),
    # The three tests that had killed a mutant only by accident, strengthened.
    ("src/fragbench/calls/collector.py", "per-call fit: an exact fit refused (> to >=)",
     "if still_planned > available:", "if still_planned >= available:",
     "test_a_plan_equal_to_the_balance_runs_on_a_priced_budget"),
    ("src/fragbench/run.py", "start-of-run fit: an exact fit refused (> to >=)",
     "if total > available:", "if total >= available:",
     "test_a_plan_equal_to_the_balance_runs_on_a_priced_budget"),
    ("src/fragbench/report/markdown.py", "report's availability table drops the first setting",
     'return wide.select("case", "lang", "variant", *order)',
     'return wide.select("case", "lang", "variant", *order[1:])',
     "test_the_report_publishes_all_four_settings_and_the_full_passage"),
    ("src/fragbench/calls/collector.py", "an incomplete answer's text dropped",
     '"text": reply.text,', '"text": reply.text if reply.status == "completed" else None,',
     "test_an_incomplete_answer_keeps_its_text_and_collection_goes_on"),
]


PLUGIN_MODULES = ("fragbench_anthropic", "fragbench_openai_chat", "fragbench_sliding_window",
                  "fragbench_token_window")


def copy_paths(root: Path) -> list[str]:
    """The copy's core and workspace plugins, ahead of any editable install elsewhere: a
    plugin imported from another checkout could import names this copy's core lacks."""
    return [str(root / "src"), *sorted(str(p) for p in root.glob("plugins/*/src"))]


def pytest_run(tests: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run pytest on `tests` (paths or node ids, or -k and its expression) as the configs do;
    the exit code, and the first line pytest marks `E` (why a test failed)."""
    command = [".venv/bin/python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               *tests]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env,
                          check=False)
    marked = [line for line in done.stdout.splitlines() if line.startswith("E ")]
    # A failed `assert x == y, message` prints the message first, then the comparison.
    compared = [line for line in marked if line[1:].strip().startswith("assert ")]
    return done.returncode, (compared or marked or [""])[0][:150]


def main(argv: list[str]) -> int:
    if "--in-a-copy" not in argv:
        print(__doc__)
        return 2
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    root = Path.cwd().resolve()
    # No .pyc: a rewrite within the same second could otherwise run stale bytecode.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(copy_paths(root)),
           "PYTHONDONTWRITEBYTECODE": "1"}
    for module in ("fragbench", *PLUGIN_MODULES):
        where = subprocess.run([".venv/bin/python", "-c",
                                f"import {module}; print({module}.__file__)"],
                               capture_output=True, text=True, env=env, check=True).stdout
        if not Path(where.strip()).resolve().is_relative_to(root):
            print(f"{module} is imported from {where.strip()}, not from this copy ({root}): "
                  "refusing")
            return 2
    chosen = [m for m in MUTANTS if only in m[1] or only in m[4]]
    if pytest_run(sorted({f"{TESTS}::{m[4]}" for m in chosen}), env)[0] != 0:
        print(f"the tests fail unmutated: fix them first ({TESTS})")
        return 1
    for path, what, old, new, test in chosen:
        source = root / path
        original = source.read_text(encoding="utf-8")
        if original.count(old) != 1:
            print(f"NOT APPLICABLE {path}: {what} (the text to replace is not there once)")
            continue
        try:
            source.write_text(original.replace(old, new), encoding="utf-8")
            code, why = pytest_run([f"{TESTS}::{test}"], env)
        finally:
            source.write_text(original, encoding="utf-8")
        print(f"{'KILLED' if code else 'SURVIVED':8} {path}: {what} -> {test}")
        if why:
            print(f"         {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
