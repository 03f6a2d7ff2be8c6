"""The plugin authors' test kit (`fragbench.testing`), on fragbench's own plugins and on plugins
broken on purpose.

A check that passes on good plugins proves nothing by itself; each promise is also shown to
fail: a chunker that drops or reorders sentences, scorers that are random or batch-dependent,
backends that retry, follow a redirect, misread the usage, write their key (as it is or
base64-encoded), keep a connection from one call to the next or read the last of two keys. The
kit reaches authors through pytest's `pytest11` entry point, which a subprocess run in a bare
folder (no conftest, no configuration) shows.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import polars as pl
import pytest

from fragbench.builtin.chunkers import SentenceGroups
from fragbench.builtin.openai_backend import OpenAIBackend, OpenAISession
from fragbench.builtin.scorers import SqrtLexical
from fragbench.interfaces import Reply, Request, Usage
from fragbench.testing import FAKE_KEY, check_backend, check_chunker, check_scorer
from fragbench.testing.loopback import CHAT, MESSAGES, RESPONSES, Server, ok
from fragbench.testing.samples import CharacterWindows

pytestmark = pytest.mark.slow

OPENAI_PARAMS: dict[str, Any] = {
    "model": "gpt-6-astra", "reasoning_effort": "medium", "max_output_tokens": 1200,
    "service_tier": "default", "store": False, "timeout_seconds": 600,
}
"""Protocol 1.0's parameters for the built-in backend (experiments/protocol-1.0)."""


# -- Registration -------------------------------------------------------------------------------

def test_the_kit_is_a_pytest11_plugin(request: pytest.FixtureRequest) -> None:
    points = importlib.metadata.entry_points(group="pytest11")
    assert [p.value for p in points if p.name == "fragbench"] == ["fragbench.testing.plugin"]
    assert request.config.pluginmanager.get_plugin("fragbench") is not None


def test_an_author_gets_the_fixtures_with_no_conftest(tmp_path: Path) -> None:
    """A bare folder, as a plugin's repository would be: the fixtures come from the entry
    point alone, and importing the plugin pulls in nothing heavy (it loads in every run)."""
    (tmp_path / "test_author.py").write_text(
        "import sys\n"
        "import openai\n"
        "def test_servers(responses_server, chat_server, messages_server,\n"
        "                 fragbench_ledger_dir):\n"
        "    assert responses_server.base_url.endswith('/v1')\n"
        "    assert not messages_server.base_url.endswith('/v1')\n"
        "    client = openai.OpenAI(api_key='k' * 20, base_url=chat_server.base_url,\n"
        "                           max_retries=0)\n"
        "    client.chat.completions.create(model='m', messages=[{'role': 'user',\n"
        "                                   'content': 'hi'}])\n"
        "    assert [r['path'] for r in chat_server.requests] == ['/v1/chat/completions']\n"
        "    import os\n"
        "    assert os.environ['FRAGBENCH_LEDGER_DIR'] == str(fragbench_ledger_dir)\n",
        encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_author.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    code = ("import sys, fragbench.testing.plugin, fragbench.testing\n"
            "heavy = ('polars', 'numpy', 'scipy', 'openai', 'anthropic', 'matplotlib')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    light = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=False)
    assert light.returncode == 0, light.stderr
    assert light.stdout.strip() == "[]"


# -- The loopback servers -----------------------------------------------------------------------

def test_each_shape_answers_its_sdk(responses_server: Server, chat_server: Server,
                                   messages_server: Server) -> None:
    """Each SDK parses each shape's body, and the usage reads back to the core's figures."""
    import anthropic
    import openai

    question = "Q?\n[K1] The office opens at 9:00.\n[K2] It closes at 17:30."
    client = openai.OpenAI(api_key=FAKE_KEY, base_url=responses_server.base_url, max_retries=0)
    response = client.responses.create(model="gpt-6-astra", input=question)
    assert response.model == "gpt-6-astra-2026-09-30"
    assert json.loads(response.output_text)["citations"] == [
        {"id": "K1", "extract": "The office opens at 9:00."}]
    assert response.usage is not None and response.usage.input_tokens == 400

    client = openai.OpenAI(api_key=FAKE_KEY, base_url=chat_server.base_url, max_retries=0)
    chat_server.script[1] = ok(**CHAT.refused("No."))
    completion = client.chat.completions.create(
        model="gpt-6-astra", messages=[{"role": "user", "content": question}])
    assert completion.object == "chat.completion" and completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 400
    refused = client.chat.completions.create(
        model="gpt-6-astra", messages=[{"role": "user", "content": question}])
    assert refused.choices[0].message.refusal == "No."
    assert refused.choices[0].message.content is None

    claude = anthropic.Anthropic(api_key=FAKE_KEY, base_url=messages_server.base_url,
                                 max_retries=0, timeout=10)
    messages_server.script[1] = ok(**MESSAGES.incomplete())
    message = claude.messages.create(
        model="claude-kit", max_tokens=100,
        messages=[{"role": "user", "content": [{"type": "text", "text": question}]}])
    assert message.model == "claude-kit" and message.stop_reason == "end_turn"
    assert json.loads(message.content[0].text)["citations"][0]["id"] == "K1"
    # The Messages API counts input without the cache; the core's total includes it.
    usage = message.usage
    assert (usage.input_tokens + usage.cache_read_input_tokens
            + usage.cache_creation_input_tokens) == MESSAGES.default_usage(0).input_tokens
    cut = claude.messages.create(model="claude-kit", max_tokens=100,
                                 messages=[{"role": "user", "content": "hi"}])
    assert cut.stop_reason == "max_tokens"
    assert [r["path"] for r in messages_server.requests] == ["/v1/messages"] * 2
    assert messages_server.requests[0]["headers"]["x-stainless-retry-count"] == "0"


def test_a_wrong_path_is_recorded_and_refused(messages_server: Server) -> None:
    import openai

    client = openai.OpenAI(api_key=FAKE_KEY, base_url=messages_server.base_url + "/v2",
                           max_retries=0)
    with pytest.raises(openai.NotFoundError, match="speaks the messages API"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert [r["path"] for r in messages_server.requests] == ["/v2/chat/completions"]
    messages_server.reset()
    assert messages_server.requests == [] and messages_server.script == {}
    with pytest.raises(ValueError, match="unknown API shape"):
        Server("completions")


def test_usage_in_the_core_terms_maps_to_each_shape() -> None:
    usage = Usage(input_tokens=1000, cached_tokens=300, cache_write_tokens=200,
                  output_tokens=50, reasoning_tokens=20)
    assert RESPONSES.usage_body(usage)["input_tokens"] == 1000
    chat = CHAT.usage_body(usage)
    assert chat["prompt_tokens"] == 1000 and chat["prompt_tokens_details"] == {
        "cached_tokens": 300, "cache_write_tokens": 200}
    messages = MESSAGES.usage_body(attrs.evolve(usage, cached_tokens=None))
    assert messages == {"input_tokens": 800, "cache_creation_input_tokens": 200,
                        "output_tokens": 50, "service_tier": "standard"}


# -- Chunkers -----------------------------------------------------------------------------------

def test_the_shipped_chunkers_keep_their_promises() -> None:
    from fragbench_sliding_window import SlidingWindow

    check_chunker(SentenceGroups())
    check_chunker(SlidingWindow())  # declares overlap = True
    check_chunker(CharacterWindows())  # spans that cut sentences, none lost


class DropsASentence(SentenceGroups):
    """Loses each passage's second sentence, numbering the rest without a gap."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        kept = sentences.filter(pl.col("position") != 1).with_columns(
            (pl.col("position").rank("ordinal").over("case", "lang", "variant") - 1)
            .cast(pl.Int32))
        return super().chunk(kept, size)


class NumbersBackwards(SentenceGroups):
    """Numbers 0..n-1, last chunk first. Declares overlap, so the coverage promise (which
    reads chunks in number order and would word it first) passes, and the kit's own check
    that numbers follow passage order is the one that catches it."""

    overlap = True

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        chunks = super().chunk(sentences, size)
        last = pl.col("chunk").max().over("case", "lang", "variant")
        return chunks.with_columns((last - pl.col("chunk")).alias("chunk"))


class Reorders(SentenceGroups):
    """Each chunk's sentences last to first. Declares overlap, as NumbersBackwards does, so
    that the kit's own order check, not the coverage promise, is the one that catches it."""

    overlap = True

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return super().chunk(sentences, size).with_columns(pl.col("fact_ids").list.reverse())


class OverlapsUndeclared:
    name = "overlaps-undeclared"
    api_version = "1.0"

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        from fragbench_sliding_window import SlidingWindow

        return SlidingWindow().chunk(sentences, size)


class Random(SentenceGroups):
    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return super().chunk(sentences, size).sample(fraction=1.0, shuffle=True)


class LeavesAGap(CharacterWindows):
    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return super().chunk(sentences, size).with_columns(pl.col("start") + 3)


class WrongText(SentenceGroups):
    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return super().chunk(sentences, size).with_columns(pl.col("text").str.to_uppercase())


class Raises(SentenceGroups):
    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        raise RuntimeError("boom")


class WholeWindowsOnly(SentenceGroups):
    """Sliding windows of exactly `size` sentences, stride 1, declared: a passage shorter than
    the window (the kit's one-sentence passage) gets no chunk at all."""

    overlap = True

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        rows = []
        ordered = sentences.sort("case", "lang", "variant", "position")
        for (case, lang, variant), part in ordered.group_by(["case", "lang", "variant"],
                                                             maintain_order=True):
            ids, texts = part["fact_id"].to_list(), part["text"].to_list()
            for n in range(len(ids) - size + 1):
                rows.append((case, lang, variant, n, ids[n:n + size],
                             " ".join(texts[n:n + size])))
        return pl.DataFrame(rows, schema={"case": pl.String, "lang": pl.String,
                                          "variant": pl.String, "chunk": pl.Int32,
                                          "fact_ids": pl.List(pl.String), "text": pl.String},
                            orient="row")


class NumbersEveryChunkZero(SentenceGroups):
    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return super().chunk(sentences, size).with_columns(pl.lit(0, pl.Int32).alias("chunk"))


class NamesAnotherPassage(SentenceGroups):
    """Adds a chunk of a passage it was not given (variant Z)."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        chunks = super().chunk(sentences, size)
        return pl.concat([chunks, chunks.head(1).with_columns(pl.lit("Z").alias("variant"))])


class LosesALastSentence(WholeWindowsOnly):
    """Overlapping windows that give up on a passage's last window: the one-sentence passage
    keeps its chunk, but every longer passage loses its last sentence."""

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        whole = super().chunk(sentences, 1)
        last = pl.col("chunk").max().over("case", "lang", "variant")
        return whole.filter((pl.col("chunk") < last) | (last == 0))


class LeavesAGapDeclared(LeavesAGap):
    overlap = True


class NoApiVersion:
    name = "no-api-version"

    def chunk(self, sentences: pl.DataFrame, size: int) -> pl.DataFrame:
        return SentenceGroups().chunk(sentences, size)


@pytest.mark.parametrize(("chunker", "promise"), [
    (WholeWindowsOnly(), "every passage it was given, and no other"),
    (NoApiVersion(), "declares the plugin API it is written for"),
    (DropsASentence(), "every sentence once and in order"),
    (NumbersBackwards(), "chunks numbered 0.. in passage order"),
    (NumbersEveryChunkZero(), "chunks numbered 0.. in passage order"),
    (NamesAnotherPassage(), "every passage it was given, and no other"),
    (LosesALastSentence(), "every sentence at least once (overlap = True)"),
    (LeavesAGapDeclared(), "every character at least once (overlap = True)"),
    (Reorders(), "sentences in passage order"),
    (OverlapsUndeclared(), "every sentence once and in order"),
    (Random(), "deterministic"),
    (LeavesAGap(), "every character once and in order"),
    (WrongText(), "text is its sentences joined by one space"),
    (Raises(), "chunk() returns every chunk"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_a_broken_chunker_fails_its_check(chunker: Any, promise: str) -> None:
    with pytest.raises(AssertionError, match=f"contract \\({re.escape(promise)}\\)"):
        check_chunker(chunker)


def test_a_passage_shorter_than_the_window_is_the_one_sentence_sample() -> None:
    """At sizes 1 and 2 only the kit's one-sentence passage is shorter than the window."""
    with pytest.raises(AssertionError) as caught:
        check_chunker(WholeWindowsOnly(), sizes=(1, 2))
    assert str(caught.value) == (
        "chunker 'sentence-groups' breaks its contract (every passage it was given, and no "
        "other): at size 2 kit-museum en A: no chunk (and 1 more passages)")


def test_the_kit_words_a_numbering_and_a_lost_sentence_as_the_core_does() -> None:
    """The kit fails with the core's lines (`fragbench.retrieval.passages.chunk_problems`), the same
    words `freeze`, `plan`, `run` and `retrieve` refuse with."""
    with pytest.raises(AssertionError) as caught:
        check_chunker(NumbersEveryChunkZero(), sizes=(2,))
    assert str(caught.value) == (
        "chunker 'sentence-groups' breaks its contract (chunks numbered 0.. in passage order): "
        "at size 2 kit-delivery en A: its 5 chunks are numbered 0, 0, 0, 0, 0, not 0 to 4 (and "
        "11 more passages)")
    with pytest.raises(AssertionError) as caught:
        check_chunker(LosesALastSentence(), sizes=(2,))
    assert str(caught.value).startswith(
        "chunker 'sentence-groups' breaks its contract (every sentence at least once (overlap "
        "= True)): at size 2 kit-delivery en A: L10 in no chunk (and ")


# -- Scorers ------------------------------------------------------------------------------------

def test_the_shipped_scorer_keeps_its_promises() -> None:
    check_scorer(SqrtLexical())


class Noisy(SqrtLexical):
    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        noise = [random.random() / 1e6 for _ in range(chunks.height)]
        return super().score(chunks, questions).with_columns(pl.col("score") + pl.Series(noise))


class BatchRelative(SqrtLexical):
    """Divides by the batch's best score: each chunk's score depends on its neighbours."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        scored = super().score(chunks, questions)
        return scored.with_columns(pl.col("score") / (pl.col("score").max() + 1.0))


class DropsARow(SqrtLexical):
    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        return super().score(chunks, questions).slice(1)


PASSAGE_AND_SIZE = ["case", "lang", "variant", "chunk_size"]


class PassageMax(SqrtLexical):
    """Divides by its passage's best score: 0/0 = NaN where no chunk holds a term of the
    question. Batch-consistent, deterministic, and caught only by a sample that bites."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        scored = super().score(chunks, questions)
        return scored.with_columns(pl.col("score") / pl.col("score").max().over(PASSAGE_AND_SIZE))


class LogScore(SqrtLexical):
    """log(score): -inf for every chunk that holds no term of the question."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        return super().score(chunks, questions).with_columns(pl.col("score").log())


class NullForNoTerm(SqrtLexical):
    """Leaves the score null where the question has no term at all."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        scored = super().score(chunks, questions)
        return scored.with_columns(pl.when(pl.col("case") != "kit-vague")
                                   .then(pl.col("score")).alias("score"))


class SummedInRowOrder(SqrtLexical):
    """A planted float bug: each score shrunk by its passage's total, a sum that runs in the
    order the rows came. Each chunk depends on its own passage only, as the rule asks, yet the
    same passage with its rows in another order adds the same numbers in another order, and
    the last bit of a score can differ."""

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        scored = super().score(chunks, questions)
        total = pl.col("score").sum().over(PASSAGE_AND_SIZE)
        return scored.with_columns(pl.col("score") / (1.0 + total))


class NoApi:
    name = "no-api"

    def score(self, chunks: pl.DataFrame, questions: pl.DataFrame) -> pl.DataFrame:
        return SqrtLexical().score(chunks, questions)


@pytest.mark.parametrize(("scorer", "promise"), [
    (Noisy(), "deterministic"),
    (BatchRelative(), "batch-consistent"),
    (SummedInRowOrder(), "batch-consistent"),
    (DropsARow(), "returns the chunks it got"),
    (PassageMax(), "a finite score for every chunk"),
    (LogScore(), "a finite score for every chunk"),
    (NullForNoTerm(), "a finite score for every chunk"),
    (NoApi(), "declares the plugin API it is written for"),
], ids=["noisy", "batch-relative", "summed-in-row-order", "drops-a-row", "passage-max",
        "log-score", "null-for-no-term", "no-api-version"])
def test_a_broken_scorer_fails_its_check(scorer: Any, promise: str) -> None:
    with pytest.raises(AssertionError, match=f"contract \\({re.escape(promise)}\\)"):
        check_scorer(scorer)


def test_a_scorer_dividing_by_its_passages_best_is_caught_on_the_case_that_bites() -> None:
    """The failure names the chunk, the value and the sample case it fails on, with what that
    case is there to catch."""
    with pytest.raises(AssertionError) as caught:
        check_scorer(PassageMax())
    assert str(caught.value).startswith(
        "scorer 'sqrt-lexical' breaks its contract (a finite score for every chunk): chunk "
        "('kit-parking', ")
    assert "scores nan (sample case kit-parking: no sentence of the passage holds a term of " \
        "its question" in str(caught.value)
    with pytest.raises(AssertionError, match=r"scores -inf; NaN or inf is what a division by "
                                             r"zero \(or the log of zero\) gives"):
        check_scorer(LogScore())


# -- Backends: the fault suite ------------------------------------------------------------------

def test_the_fault_suite_can_point_a_backend_through_its_params(responses_server: Server,
                                                                 tmp_path: Path) -> None:
    """`via="params"`: the config's base_url, with OPENAI_BASE_URL unset (it would come
    first). Every shipped backend also runs the suite the default way (`via="env"`), in
    test_fault_suite.py."""
    ran = check_backend(OpenAIBackend(), OPENAI_PARAMS, responses_server, via="params",
                        tmp_path=tmp_path)
    for scenario in ("every call answered", "HTTP 500 at call 2", "a connection refused at "
                     "call 1", "a body trickling over 5 s at call 1 (timeout 0.5 s)",
                     "a usage without cache_write_tokens at call 2", "a refusal at call 2"):
        assert scenario in ran
    # What the collector wrote is there to read, and holds no secret (checked by the kit).
    assert any(tmp_path.rglob("journal.jsonl"))


def own_client(**options: Any) -> Any:
    """The SDK's own HTTP client (not fragbench's transport), with no connection kept alive
    between calls, so that the suite reaches the promise a broken backend breaks."""
    import httpx2
    import openai

    return openai.DefaultHttpxClient(timeout=10, limits=httpx2.Limits(
        max_keepalive_connections=0), **options)


class Retrying(OpenAIBackend):
    """The SDK's default: two retries, with no idempotency key, on the SDK's own HTTP client
    (fragbench's transport would refuse to send the second request of a call)."""

    def open(self, params: dict[str, Any]) -> OpenAISession:
        session = super().open(params)
        session.client = session.client.with_options(max_retries=2, http_client=own_client())
        return session


class FollowsRedirects(OpenAIBackend):
    def open(self, params: dict[str, Any]) -> OpenAISession:
        session = super().open(params)
        session.client = session.client.with_options(
            http_client=own_client(follow_redirects=True))
        return session


class ReusesConnections(OpenAIBackend):
    """The SDK's own pooled client: a connection kept alive from one call to the next."""

    def open(self, params: dict[str, Any]) -> OpenAISession:
        import openai

        session = super().open(params)
        session.client = session.client.with_options(
            http_client=openai.DefaultHttpxClient(timeout=10))
        return session


class ReadsTheLastKey(OpenAIBackend):
    """Parses the body with plain json.loads: of two `usage` objects, the last one wins."""

    def open(self, params: dict[str, Any]) -> OpenAISession:
        session = super().open(params)
        plain = session.read

        def read(body: Any, text: str, request_id: str | None) -> Reply:
            return plain(json.loads(text), text, request_id)
        session.read = read
        session._read = lambda text, readable, status, request_id: read(  # type: ignore
            None, text, request_id)
        return session


class WritesItsKeyInBase64(OpenAIBackend):
    def open(self, params: dict[str, Any]) -> OpenAISession:
        import base64

        key = os.environ.get("OPENAI_API_KEY", "").encode()
        Path("backend-debug.log").write_text(f"auth={base64.b64encode(key).decode()}\n",
                                             encoding="utf-8")
        return super().open(params)


class WritesItsKeyFolded(OpenAIBackend):
    """The key written across three lines, as a wrapped log line or a folded header would: each
    break inside one half, so that neither half stands whole in the file."""

    def open(self, params: dict[str, Any]) -> OpenAISession:
        key = os.environ.get("OPENAI_API_KEY", "")
        q = len(key) // 4
        Path("backend-debug.log").write_text(f"key={key[:q]}\n    {key[q:3 * q]}\n    "
                                             f"{key[3 * q:]}\n", encoding="utf-8")
        return super().open(params)


class MisreadsTheCache(OpenAIBackend):
    def open(self, params: dict[str, Any]) -> OpenAISession:
        return _Mapped(super().open(params), lambda r: attrs.evolve(
            r, usage=attrs.evolve(r.usage, cached_tokens=0) if r.usage else None))


class WritesItsKey(OpenAIBackend):
    def open(self, params: dict[str, Any]) -> OpenAISession:
        Path("backend-debug.log").write_text(f"key={os.environ.get('OPENAI_API_KEY', '')}\n",
                                             encoding="utf-8")
        return super().open(params)


class ReturnsItsKey(OpenAIBackend):
    def open(self, params: dict[str, Any]) -> OpenAISession:
        key = os.environ.get("OPENAI_API_KEY", "")
        return _Mapped(super().open(params), lambda r: attrs.evolve(r, error=f"sent as {key}"))


class _Mapped(OpenAISession):
    def __init__(self, inner: OpenAISession, change: Any) -> None:
        self.inner, self.change, self.endpoint = inner, change, inner.endpoint

    def send(self, request: Request) -> Reply:
        # What the collector and the kit set on this session goes to the one that sends.
        self.inner.on_body, self.inner.max_body_bytes = self.on_body, self.max_body_bytes
        return self.change(self.inner.send(request))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize(("backend", "promise"), [
    (Retrying(), "one request per call, never a retry"),
    (FollowsRedirects(), "redirects are not followed"),
    (MisreadsTheCache(), "usage maps to cost"),
    (WritesItsKey(), "no secret written"),
    (ReturnsItsKey(), "no secret written"),
    (ReusesConnections(), "each call on a connection of its own"),
    (ReadsTheLastKey(), "a body with a repeated key is no response"),
    (WritesItsKeyInBase64(), "no secret written"),
    (WritesItsKeyFolded(), "no secret written"),
], ids=["retries", "follows-redirects", "misreads-the-cache", "writes-its-key",
        "returns-its-key", "reuses-connections", "reads-the-last-key",
        "writes-its-key-in-base64", "writes-its-key-folded"])
def test_a_broken_backend_fails_the_fault_suite(responses_server: Server, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                backend: Any, promise: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(AssertionError, match=f"contract \\({re.escape(promise)}\\)") as failed:
        check_backend(backend, OPENAI_PARAMS, responses_server, tmp_path=tmp_path)
    assert FAKE_KEY not in str(failed.value)  # the message names the key, never shows it
    # Every call into the backend ran inside the kit's folder, where the secret check looks.
    assert list(elsewhere.iterdir()) == []
