"""The redactor at the edges (issue 14, items 3 and 9): a key echoed in another form (split by
whitespace, joined with invisible characters, base64, percent-escaped, `\\u`-escaped, in halves),
and hostile text (nested 100,000 deep, lone surrogates, NULs, 16 MB) read in linear time,
without recursion, never raising."""

from __future__ import annotations

import base64
import json
import re
import sys
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fragbench import redact
from fragbench.redact import MARK, MIN_SECRET, Redactor

pytestmark = pytest.mark.slow

KEY = "sk-proj-CANARYcanary0123456789abcdefXYZ"
OPAQUE = "opaque-credential-4417-zulu-8831"
# Its base64 holds '+' and '/' at every alignment: the two alphabets differ on it.
BYTEY = "tok?~>en-?>~?>~-0099-zz?~>~?"
SECRETS = (KEY, OPAQUE, BYTEY)
REDACTOR = Redactor(SECRETS)
PROSE = "The answer cites sentence 4 of the source, as asked. "


def halves(secret: str) -> tuple[str, str]:
    return secret[:len(secret) // 2], secret[len(secret) // 2:]


# -- What a reader could decode from a text (independent of the redactor's own code) ----------

def _unescape(text: str) -> str:
    text = re.sub(r"\\+u([0-9a-fA-F]{4})",
                  lambda m: m.group(0) if 0xD800 <= int(m.group(1), 16) < 0xE000
                  else chr(int(m.group(1), 16)), text)
    text = re.sub(r"\\+[nrtbf]", " ", text)
    return re.sub(r"\\+([\"/\\])", r"\1", text)


def _visible(text: str) -> str:
    return "".join(c for c in text if not (c.isspace() or unicodedata.category(c) in ("Cf", "Cc")))


def readings(text: str) -> Iterator[str]:
    """The text as is, unescaped (three levels), percent-decoded, without invisible characters,
    in lower case, and every base64 run in it decoded at each of four offsets."""
    for _ in range(3):
        text = _unescape(text)
    text = _visible(urllib.parse.unquote(text, errors="replace"))
    yield text.lower()
    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        run = run.replace("-", "+").replace("_", "/")
        for offset in range(4):
            part = run[offset:]
            part = part[:len(part) - len(part) % 4]
            yield base64.b64decode(part).decode("latin-1").lower()


def leaks(text: str, secret: str) -> list[str]:
    """Every piece of `secret` of MIN_SECRET characters that a reader could still find."""
    pieces = {secret[i:i + MIN_SECRET].lower() for i in range(len(secret) - MIN_SECRET + 1)}
    return sorted({p for r in readings(text) for p in pieces if p in r})


def test_the_leak_checker_sees_every_form() -> None:
    """The checker used below finds each form when nothing is redacted."""
    for secret in SECRETS:
        for form in FORMS.values():
            assert leaks(form(secret), secret), form


# -- Item 9: the forms of a key, and of its halves ---------------------------------------------

def b64(data: bytes, shift: int, urlsafe: bool) -> str:
    """`data` inside a longer base64 text, starting `shift` bytes into a 3-byte group."""
    blob = b"\x01\x02"[:shift] + data + b" and more bytes after it"
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(blob).decode()


def percent(text: str, every: int = 1, upper: bool = True) -> str:
    return "".join(("%%%02X" if upper else "%%%02x") % ord(c) if i % every == 0 else c
                   for i, c in enumerate(text))


FORMS: dict[str, Callable[[str], str]] = {
    "as is": lambda s: s,
    "in capitals": str.upper,
    "split by a newline": lambda s: s[:11] + "\n" + s[11:],
    "split by CRLF in the middle": lambda s: s[:len(s) // 2] + "\r\n" + s[len(s) // 2:],
    "spaces and tabs between characters": lambda s: " \t".join(s),
    "zero-width space between characters": lambda s: "\u200b".join(s),
    "ZWNJ, ZWJ, word joiner, BOM, soft hyphen": lambda s: "".join(
        c + "\u200c\u200d\u2060\ufeff\xad"[i % 5] for i, c in enumerate(s)),
    "percent-escaped, upper-case hex": percent,
    "percent-escaped, lower-case hex": lambda s: percent(s, upper=False),
    "percent-escaped in part": lambda s: percent(s, every=3),
    "url-quoted": lambda s: urllib.parse.quote(s, safe=""),
    "\\u escapes": lambda s: "".join(f"\\u{ord(c):04x}" for c in s),
    "\\u escapes in part, upper-case hex": lambda s: "".join(
        f"\\u{ord(c):04X}" if i % 2 else c for i, c in enumerate(s)),
    "\\u200b escapes between characters": lambda s: "\\u200b".join(s),
    "\\n escape in the middle": lambda s: s[:9] + "\\n" + s[9:],
    **{f"base64, {alphabet}, shift {shift}":
       (lambda s, shift=shift, urlsafe=alphabet == "URL-safe": b64(s.encode(), shift, urlsafe))
       for alphabet in ("standard", "URL-safe") for shift in range(3)},
    "base64 wrapped at 76 columns": lambda s: base64.encodebytes(
        b"x" * 50 + s.encode() + b"y" * 50).decode(),
    "base64, JSON-escaped slashes": lambda s: b64(s.encode(), 1, False).replace("/", "\\/"),
    "base64, percent-escaped": lambda s: urllib.parse.quote(b64(s.encode(), 2, False), safe=""),
}


def test_the_two_base64_alphabets_differ_on_the_test_secret() -> None:
    for shift in range(3):
        assert b64(BYTEY.encode(), shift, True) != b64(BYTEY.encode(), shift, False)


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("form", list(FORMS))
def test_a_secret_in_any_form_is_redacted_and_nothing_else(secret: str, form: str) -> None:
    echoed = FORMS[form](secret)
    text = f"{PROSE}Your key: {echoed} (sent back).\n{PROSE}"
    out = REDACTOR.text(text)
    assert leaks(out, secret) == []
    assert out.startswith(f"{PROSE}Your key: ") and out.endswith(f" (sent back).\n{PROSE}")
    assert MARK in out and REDACTOR.found(text)


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("which", [0, 1])
def test_either_half_of_a_secret_in_any_form_is_redacted(secret: str, form: str,
                                                         which: int) -> None:
    half = halves(secret)[which]
    assert len(half) >= MIN_SECRET
    out = REDACTOR.text(f"{PROSE}One half: {FORMS[form](half)}; the rest later. {PROSE}")
    assert leaks(out, half) == []
    assert out.startswith(f"{PROSE}One half: ") and out.endswith(f"; the rest later. {PROSE}")


def test_both_halves_sent_apart_in_different_forms() -> None:
    first, second = halves(KEY)
    joined = "\u2060".join(first)
    text = (f"part one {base64.b64encode(first.encode()).decode()} then "
            f"{percent(second, every=2)} and {joined}")
    out = REDACTOR.text(text)
    assert leaks(out, first) == [] and leaks(out, second) == []
    assert out.count(MARK) == 3 and out.startswith("part one ")


def json_body(parts: list[str]) -> str:
    """A Responses API body whose answer (JSON in a JSON string) holds `parts`, and whose other
    strings hold more of them."""
    answer = json.dumps({"answer": "Here: " + " / ".join(parts), "citations": ["c1"]})
    body = {"id": "resp_1", "status": "completed", "output": [{"type": "message", "content": [
        {"type": "output_text", "text": answer, "annotations": []}]}],
        "metadata": {"echo": parts[0], "list": parts[1:]}}
    return json.dumps(body)


def test_forms_inside_a_json_body_in_a_record() -> None:
    """Through `value`, as the journal calls it: the raw body of a record, JSON with the forms
    inside its strings (and inside the answer's JSON in one of them), stays JSON, keeps all but
    the key, and holds no form of it."""
    forms = [FORMS[name](secret) for secret in (KEY, OPAQUE) for name in FORMS]
    forms += [FORMS[name](half) for name in FORMS for half in halves(KEY)]
    raw = json_body(forms)
    record = {"type": "outcome", "call_id": "c-3", "raw": raw, "text": forms[5]}
    out = REDACTOR.value(record)
    assert out != record  # what the journal compares to say "redacted"
    assert out["type"] == "outcome" and out["call_id"] == "c-3"
    body = json.loads(out["raw"])
    assert body["id"] == "resp_1" and body["output"][0]["content"][0]["type"] == "output_text"
    answer = json.loads(body["output"][0]["content"][0]["text"])
    assert answer["answer"].startswith("Here: ") and answer["citations"] == ["c1"]
    for secret in (KEY, OPAQUE, *halves(KEY)):
        assert leaks(out["raw"], secret) == [] and leaks(out["text"], secret) == []


def test_json_escaped_forms_inside_strings() -> None:
    """`\\uXXXX` escapes of the key's characters and of invisible ones, a `\\n` escape, as a
    server writes them inside JSON strings."""
    escaped = "\\u200d".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(KEY))
    raw = ('{"a": "' + escaped + '", "b": "' + KEY[:20] + '\\n' + KEY[20:] + '", '
           '"c": "' + "\\u00ad".join(OPAQUE) + '"}')
    out = REDACTOR.text(raw)
    assert json.loads(out) == {"a": MARK, "b": MARK, "c": MARK}


# -- The behaviour that held before, still held ---------------------------------------------

def test_earlier_guarantees_hold() -> None:
    r = Redactor([KEY])
    # any letter case; \u escapes whole or in part
    assert r.text(f"bad key {KEY.upper()}!") == f"bad key {MARK}!"
    escaped = "".join(f"\\u{ord(c):04x}" for c in KEY)
    assert r.text(f'{{"t": "key {escaped}"}}') == f'{{"t": "key {MARK}"}}'
    assert r.text(KEY[:6] + escaped[6 * 6:12 * 6] + KEY[12:]) == MARK
    # a key split across two JSON fields, and a repeated key (a parser keeps only the last)
    split = json.dumps({"output": [{"text": "the key is " + KEY[:10]}, {"text": KEY[10:]}]})
    assert json.loads(r.text(split)) == {"output": [{"text": "the key is " + MARK},
                                                    {"text": MARK}]}
    repeated = f'{{"error": "{KEY}", "error": null}}'
    assert r.text(repeated) == f'{{"error": "{MARK}", "error": null}}'
    # a secret cut at a text's end or start (two lines written apart)
    assert r.text("the key is " + KEY[:9]) == "the key is " + MARK
    assert r.text(KEY[-9:] + " was the rest") == MARK + " was the rest"
    # ...but a short piece of it inside ordinary text is ordinary text
    assert r.text(f"see {KEY[:9]} here") == f"see {KEY[:9]} here"


def test_account_shapes_are_redacted_without_any_secret() -> None:
    r = Redactor()
    for shape in ("sk-" + "a1B2" * 5, "org-" + "Q" * 20, "proj_" + "z9" * 9,
                  "Bearer " + "tok.en_" * 3, "BEARER\t" + "x" * 16, "sk-" + "*" * 20):
        assert r.text(f"<{shape}>") == f"<{MARK}>", shape
    for ordinary in ("sk-learn is a library", "org-wide", "bearer of news", "proj_x",
                     "task-" + "a" * 30):
        assert r.text(ordinary) == ordinary


def test_nothing_found_means_the_same_text_and_an_equal_record() -> None:
    text = PROSE * 50 + '{"a": "\\u00e9\\n%41 c2stcHJvai1"}'
    assert REDACTOR.text(text) is text and not REDACTOR.found(text)
    record = {"at": "2026-12-01", "n": 3, "raw": text, "list": [1, "two", None], "ok": True}
    assert REDACTOR.value(record) == record


def test_short_or_blank_values_are_not_secrets() -> None:
    r = Redactor(["short", "   ", "\u200b" * 10, ""])
    assert r.text("short story about nothing") == "short story about nothing"


# -- Item 3: hostile text read in linear time, no recursion, never raising --------------------

@pytest.mark.parametrize("depth", [500, 100_000])
def test_a_deeply_nested_body_is_redacted(depth: int) -> None:
    body = '{"a": [' * depth + f'"key {KEY}"' + "]}" * depth
    out = REDACTOR.text(body)
    assert out == body.replace(KEY, MARK)
    record = REDACTOR.value({"type": "outcome", "raw": body})
    assert record["raw"] == out


def test_a_deeply_nested_record_is_walked_without_recursion() -> None:
    record: Any = f"key {KEY}"
    for _ in range(100_000):
        record = {"k": [record]}
    out = REDACTOR.value(record)
    for _ in range(100_000):
        out = out["k"][0]
    assert out == f"key {MARK}"


def test_a_record_holding_one_list_twice_or_itself_is_copied_once() -> None:
    shared = [f"a {KEY}"]
    looped: list[Any] = ["x"]
    looped.append(looped)
    out = REDACTOR.value({"a": shared, "b": shared, "c": looped})
    assert out["a"] is out["b"] and out["a"] == [f"a {MARK}"]
    assert out["c"][1] is out["c"]


def test_a_lone_surrogate_escape_is_kept_as_it_was() -> None:
    body = '{"answer": "\\ud83d broken, \\ud83d\\ude00 whole, ' + KEY + ' \\udc00"}'
    out = REDACTOR.text(body)
    assert out == body.replace(KEY, MARK)
    out.encode("utf-8")  # no surrogate created by decoding
    assert json.loads(out)["answer"].startswith("\ud83d broken")


def test_odd_characters_never_raise() -> None:
    text = "\x00" + KEY + "\ud800\udfff\x00\\u\\ud8\\\\\\%%4%zz" + "\U0010ffff" * 3 + "\u0130" * 9
    out = REDACTOR.text(text)
    assert KEY not in out and out.startswith("\x00" + MARK + "\ud800\udfff")
    assert REDACTOR.value({"\ud800": text})  # keys too


@settings(max_examples=200, deadline=None)
@given(before=st.text(st.characters(blacklist_categories=())),
       after=st.text(st.characters(blacklist_categories=())),
       form=st.sampled_from(sorted(FORMS)))
def test_any_text_around_any_form(before: str, after: str, form: str) -> None:
    text = before + " " + FORMS[form](OPAQUE) + " " + after
    out = REDACTOR.text(text)  # never raises
    assert leaks(out, OPAQUE) == []
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    out.encode("utf-8")


def test_every_character_is_mapped_back() -> None:
    """All 1,114,112 code points (surrogates, NUL, invisible ones included) around the key:
    the key alone is replaced."""
    everything = "".join(map(chr, range(0x110000)))
    text = everything + KEY + everything[::-1] + "\\u0073" + KEY[1:]
    assert REDACTOR.text(text) == everything + MARK + everything[::-1] + MARK


@pytest.mark.parametrize("run", ["\\", "\\u0041", "%41", "0a1b", "\\\\n"])
def test_long_runs_of_escape_characters_are_cut_and_mapped(run: str) -> None:
    """Text made only of what escapes are made of, where a chunk cannot be cut at an ordinary
    character: still read in pieces, and mapped back exactly."""
    hex_secret = "deadbeef0123456789abcdef"
    r = Redactor([hex_secret, KEY])
    filler = run * (1_000_000 // len(run))
    escaped = "".join(f"\\u{ord(c):04x}" for c in KEY)
    text = f"{filler} {hex_secret} {filler} {escaped} {filler}"
    assert r.text(text) == f"{filler} {MARK} {filler} {MARK} {filler}"


def test_a_16_mb_body_is_redacted_exactly() -> None:
    """Linear time, shown by running it (the speed itself is in benchmarks/bench_redact.py)."""
    line = "Lines of an answer with café, \\n and \\\"quotes\\\" in them, long enough.\n"
    block = line * (4_000_000 // len(line))
    forms = (KEY, "\u200b".join(KEY), base64.urlsafe_b64encode(b"\x01" + KEY.encode()).decode())
    body = "".join(block + form + " " for form in forms) + block
    assert len(body) > 12_000_000
    out = REDACTOR.text(body)
    # (the first base64 character is the extra byte's alone)
    assert out == f"{block}{MARK} {block}{MARK} {block}A{MARK} {block}"


def profiled_calls(action: Callable[[], object]) -> int:
    """How many Python and C function calls `action` makes: work that a per-character or
    per-word loop, or a rescan per match, would multiply."""
    count = 0

    def tally(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(tally)
    try:
        action()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("kind", ["prose", "escaped JSON"])
def test_the_work_is_linear_and_per_chunk(kind: str) -> None:
    """The calls made grow with the text's chunks (16 KiB), not with its words, characters or
    escapes: 1 MB and 8 MB bodies, each with the key in a few forms."""
    word = "word " if kind == "prose" else 'w\\u00e9\\n\\"'

    def body(mb: int) -> str:
        filler = word * (250_000 // len(word))
        return "".join(filler + f" {FORMS[f](KEY)} " for f in list(FORMS)[:4]) * mb

    small, large = body(1), body(8)
    assert len(large) == 8 * len(small) > 7_000_000
    calls_small = profiled_calls(lambda: REDACTOR.text(small))
    calls_large = profiled_calls(lambda: REDACTOR.text(large))
    assert calls_large < 16 * calls_small  # 8 times the text: about 8 times the work, not 64
    assert calls_large < len(large) / 100  # and nothing per word (or escape): 1 in 5 (or 10)


def test_many_keys_in_one_text() -> None:
    text = " ".join([KEY] * 20_000)
    assert REDACTOR.text(text) == " ".join([MARK] * 20_000)


class _CountingPattern:
    """`redact._ESCAPE` as it is, counting the characters each `finditer` is given to read."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.read = pattern, 0

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.read += max(end - pos, 0)
        return self.pattern.finditer(text, pos, end)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pattern, name)


@pytest.mark.parametrize("run", ["0123456789abcdef", "u00e9"])
def test_a_long_run_of_escape_characters_is_read_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch, run: str) -> None:
    """A body of hex digits (the characters escapes are made of, with no escape in it) is read
    a bounded number of times whatever its length: once, the cut of each 16 KiB chunk scanned
    the rest of the text for an escape, quadratic in the body's size (20 s for 16 MB)."""
    from fragbench import redact

    counting = _CountingPattern(redact._ESCAPE)
    monkeypatch.setattr(redact, "_ESCAPE", counting)
    text = run * (2_000_000 // len(run))
    assert REDACTOR.text(text + " " + KEY) == text + " " + MARK
    assert counting.read < 8 * len(text), counting.read  # about 2 passes; was ~120 (quadratic)


# -- The quick path: a value holding none of the needles is not viewed -----------------------

_PIECES = st.sampled_from([
    "sk-", "org-", "proj_", "Bearer ", "SK-", KEY[:MIN_SECRET], KEY[-MIN_SECRET:],
    OPAQUE[:MIN_SECRET], OPAQUE[-MIN_SECRET:], " ",
    # ends split by what the skeleton drops: found there, not in the lower case
    KEY[:4] + "\u200b" + KEY[4:MIN_SECRET], OPAQUE[-MIN_SECRET:-4] + " \t" + OPAQUE[-4:],
    "\u200b", "\u00ad", "\u0130", "é", "ب",
    *(form for form, _, _ in REDACTOR._base64[:6]),  # the needles themselves
    "word", "0123456789", "\t", '"',
    # escapes, of the needles' characters too (`\\u0073k-` is `sk-` decoded): the quick path
    # then looks at the decoded view
    "\\", "%", "\\u0073", "\\u0053K-", "%73k%2D", "\\\\u0073", "\\n", '\\"', "\\u200b", "%E2%80%8B",
    "".join(f"\\u{ord(c):04x}" for c in KEY[:MIN_SECRET]),
    "".join(f"%{ord(c):02X}" for c in OPAQUE[-MIN_SECRET:]),
])


class _Viewed(Redactor):
    """The same redactor, every text viewed (the quick path never taken)."""

    def _nothing_in(self, text: str) -> bool:
        return False


VIEWED = _Viewed(SECRETS)


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=12))
def test_the_quick_path_finds_what_the_views_find(parts: list[str]) -> None:
    """`Redactor._nothing_in` skips the views only where they would find nothing: on texts
    made of secrets' ends, base64 forms, shapes' starts and invisible characters run together
    (escaped or not), the quick path and the views redact alike."""
    text = "".join(parts)
    assert REDACTOR.text(text) == VIEWED.text(text)
    assert Redactor().text(text) == _Viewed().text(text)  # no secrets: shapes alone
    # And with chunks of a few characters, so that the views are built across many cuts.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redact, "CHUNK", 16)
        patch.setattr(redact, "PIECE", 4)
        assert REDACTOR.text(text) == VIEWED.text(text)
        assert Redactor().text(text) == _Viewed().text(text)
