"""The one pin of protocol 1.0's committed frozen plan.

`experiments/protocol-1.0/experiment.json` changes only by a deliberate refreeze: of its
config, prompts or corpus, of a plugin it uses, or of fragbench's own code (the plan's `core`
block). A refreeze updates this hash, here and nowhere else, in the same commit, with the
reason in the message and below."""

PROTOCOL_PLAN_SHA256 = "f667e20cf21dd2a1d414f4c60b199b7be98d0b63e1ed51ab08b4b05f89c741c9"
"""experiments/protocol-1.0/experiment.json as last refrozen, deliberately. Issue 26 (100,000
calls): each report states its experiment's own limits, so protocol 1.0's config names its
own (`limits`, frozen in `parameters.limits`), and core files changed. Issue 25 (the house
by stage): the plan records fragbench's own code (`core`: version, one sha256, each file's
sha256), and the modules moved into packages by stage, so the built-in plugins' imports (and
their module files) changed. Refrozen twice in that issue: first with the move, then once
more after the last edits of core files it made (docstrings for the API reference, two
messages pointing at the README sections that moved to docs/, three type-check fixes),
so that the committed plans match the code that lands. Before that, each refreeze and its
reason: issue 15 (plugin API 1.0) added `api_version = "1.0"` to every built-in plugin, so
their module files changed; then the built-in measures declared their tables (`tables`, which
the core checks their output against), so their module files changed again; then issue 16
made `sqrt-lexical`'s per-passage `score` fast (a term list per chunk instead of a row per
term; the same scores to the bit, test_scorer_reference.py), so its module file changed;
then issue 17 gave `sqrt-lexical` compiled collection-mode methods (`collection_index_sentences`,
`collection_top_k`) and the mode `sharded` for the Ray engine, its per-passage `score` unchanged,
so its module file changed again (three times: then its collection index refused counts past
int32, then it held each slice's row pointers in int32 and its chunk stamps as views).
Issue 14 items 3
and 11 added the response size bound
(`parameters.max_response_bytes`) and every plugin's code (`plugins[].code_sha256`, built-in
plugins by their module file, so an edit of `fragbench/builtin/openai_backend.py` is a new plan
too). Before that it was unchanged since commit bce0559: adding the second provider and the
OpenAI-compatible backends changed nothing in it.
Also: Refrozen for issue 14 (response bound and plugin code hashes: see test_contracts.py), and for
issue 16 (`sqrt-lexical`'s faster `score`, the same scores: its module file's hash changed)."""
