"""Corpora a test writes: the protocol corpus as columnar tables, a synthetic collection."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from fragbench.corpus.cases import (
    Case,
)
from fragbench.text import STOPWORDS
from support.suite import ROOT


def columnar(cases: list[Case], groups: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The cases as the two columnar tables (each language a row, as the format says)."""
    case_rows, sentence_rows = [], []
    for n, case in enumerate(cases):
        for lang, passage in case.langs.items():
            row = {"case": case.id, "lang": lang, "license": case.license,
                   "source": passage.source, "question": passage.question,
                   "conditions": list(case.conditions),
                   "variants": {k: list(v) for k, v in case.variants.items()}}
            if groups:
                row["groups"] = {"topic": case.id, "size": "small" if n else "large"}
            case_rows.append(row)
            sentence_rows += [{"case": case.id, "lang": lang, "fact_id": f, "text": t}
                              for f, t in passage.facts.items()]
    return pl.DataFrame(case_rows), pl.DataFrame(sentence_rows)


def write(folder: Path, cases: pl.DataFrame, sentences: pl.DataFrame,
          fmt: str = "parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for frame, name in ((cases, "cases"), (sentences, "sentences")):
        if fmt == "parquet":
            frame.write_parquet(folder / f"{name}.parquet")
        else:
            frame.write_ndjson(folder / f"{name}.jsonl")
    return folder


TOML_CORPUS = ROOT / "corpus" / "0.2"


def synthetic(seed: int, passages: int) -> tuple[list, list]:
    rng = random.Random(seed)
    rows = []
    for p in range(passages):
        lang = rng.choice(["en", "fr"])
        for position in rng.sample(range(100), rng.randint(1, 7)):  # gaps and any order
            vocabulary = [*WORDS, *STOPWORDS[lang][:8]]
            words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 6))]
            rows.append((f"p{p}", position, lang, " ".join(words)))
    rng.shuffle(rows)
    queries = [(f"q{i}", rng.choice(["en", "fr"]),
                " ".join(rng.choice([*WORDS, "the", "le", "unknownword"])
                         for _ in range(rng.randint(1, 4))))
               for i in range(3000)]
    return rows, queries


WORDS = ["prix", "délai", "offre", "client", "remboursé", "jours", "price", "refund", "days",
         "offer", "client", "hosting", "données", "data", "l’offre", "12,50", "Élevé", "eleve",
         "contract", "contrat", "sans", "without"]
