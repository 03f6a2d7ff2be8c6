"""HotpotQA distractor-setting data for the import tests and benchmarks/bench_import.py.

`FIXTURE` is written in HotpotQA's exact published shape (the keys of its dev file, in its
order: `_id`, `answer`, `question`, `supporting_facts`, `context`, `type`, `level`; sentences
with the leading space the dataset keeps), authored here: bridge and comparison questions, the
three levels, a title with spaces, punctuation and accents, a supporting fact past its
paragraph's end, a blank sentence, and a question whose only supporting fact names no
sentence (skipped). `generate(n)` makes n such questions, deterministically
(`questions(n)` one at a time, `write_stream` writes them without holding them all).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

FIXTURE: list[dict[str, Any]] = [
    {
        "_id": "5a8b57f25542995d1e6f1371",
        "answer": "yes",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
        "context": [
            ["Adam Collis", ["Adam Collis is an American filmmaker and actor.",
                             " He attended Duke University from 1986 to 1990."]],
            ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker, actor and writer.",
                         " In the 1950s he made a number of low-budget films.",
                         " He died in 1978."]],
            ["Scott Derrickson", ["Scott Derrickson is an American director, screenwriter "
                                  "and producer.",
                                  " He lives in Los Angeles, California."]],
        ],
        "type": "comparison",
        "level": "hard",
    },
    {
        "_id": "5a8c7595554299585d9e36b6",
        "answer": "Boulevard Saint-Germain",
        "question": "On which boulevard is the café where the writer of Les Chemins de la "
                    "liberté met Simone de Beauvoir?",
        "supporting_facts": [["Café de Flore (Paris)", 1], ["Jean-Paul Sartre", 0],
                             ["Café de Flore (Paris)", 7]],
        "context": [
            ["Jean-Paul Sartre", ["Jean-Paul Sartre wrote Les Chemins de la liberté and met "
                                  "Simone de Beauvoir at the Café de Flore.",
                                  " He declined the Nobel Prize in 1964."]],
            ["Café de Flore (Paris)", ["The Café de Flore is one of the oldest coffeehouses "
                                       "in Paris.",
                                       " It stands on the Boulevard Saint-Germain, at the "
                                       "corner of the rue Saint-Benoît."]],
            ["Les Deux Magots", ["Les Deux Magots is a café nearby.",
                                 " Its name comes from two statues of Chinese merchants."]],
        ],
        "type": "bridge",
        "level": "medium",
    },
    {
        "_id": "5ab3b0bf5542992ade7c6e39",
        "answer": "1,016",
        "question": "How many seats has the arena where the Rockets played in 1990?",
        "supporting_facts": [["The Summit", 1], ["Houston Rockets", 1]],
        "context": [
            ["Houston Rockets", ["The Houston Rockets are a basketball team.",
                                 " In 1990 the Rockets played at The Summit.", " "]],
            ["The Summit", ["The Summit is an arena in Houston.",
                            " The Summit has 1,016 seats in its upper bowl."]],
        ],
        "type": "bridge",
        "level": "easy",
    },
    {
        "_id": "5ae0185b55429942ec259c1b",
        "answer": "no",
        "question": "Are Lake Ohrid and Lake Prespa in the same country?",
        "supporting_facts": [["Lake Ohrid", 4]],
        "context": [
            ["Lake Ohrid", ["Lake Ohrid straddles the border of two countries."]],
            ["Lake Prespa", ["Lake Prespa lies on the border of three countries."]],
        ],
        "type": "comparison",
        "level": "medium",
    },
]

WORDS = [
    "river", "city", "museum", "film", "album", "band", "actor", "director", "founded", "born",
    "played", "league", "team", "station", "bridge", "island", "novel", "author", "award",
    "season", "county", "village", "castle", "church", "battle", "war", "treaty", "company",
    "airline", "school", "university", "mountain", "lake", "railway", "festival", "opera",
    "painter", "poet", "singer", "king", "queen", "emperor",
]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(8, 20))).capitalize() + "."


def questions(n: int, seed: int = 16) -> Iterator[dict[str, Any]]:
    """n questions in HotpotQA's shape, one at a time: 10 paragraphs of 2 to 6 sentences
    each, two of them supporting; one question in 100 also names a sentence past its
    paragraph's end."""
    rng = random.Random(seed)
    for i in range(n):
        titles = [f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {i}-{p}"
                  for p in range(10)]
        context = [[t, [(" " if s else "") + _sentence(rng)
                        for s in range(rng.randint(2, 6))]] for t in titles]
        gold = rng.sample(range(10), 2)
        supporting = [[titles[g], rng.randrange(len(context[g][1]))] for g in gold]
        if i % 100 == 0:
            supporting.append([titles[gold[0]], 99])
        kind = "comparison" if i % 4 == 0 else "bridge"
        yield {
            "_id": f"{i:024x}", "answer": "yes",
            "question": " ".join(rng.choices(WORDS, k=10)) + "?",
            "supporting_facts": supporting, "context": context, "type": kind,
            "level": ("easy", "medium", "hard")[i % 3],
        }


def generate(n: int, seed: int = 16) -> list[dict[str, Any]]:
    """`questions(n, seed)` as a list."""
    return list(questions(n, seed))


def write_stream(path: Path, items: Iterable[dict[str, Any]]) -> Path:
    """`write(path, list(items))`'s bytes, one question in memory at a time (a 540 MB file
    for benchmarks/bench_import.py --scale)."""
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[")
        for number, item in enumerate(items):
            handle.write((", " if number else "") + json.dumps(item, ensure_ascii=False))
        handle.write("]")
    return path


def write(path: Path, questions: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")
    return path


def frozen_experiment(root: Path, questions: list[dict[str, Any]], name: str = "exp") -> Path:
    """`questions` imported (`fragbench import hotpotqa`) into `root`/corpus, `fragbench new
    experiment NAME` on it, frozen: the experiment folder, as a user makes it."""
    from support.cli import run_cli

    write(root / "hotpot.json", questions)
    for args in (("import", "hotpotqa", str(root / "hotpot.json"), "--out", str(root / "corpus")),
                 ("new", "experiment", name, "--dir", str(root), "--corpus",
                  str(root / "corpus")),
                 ("freeze", str(root / name))):
        ran = run_cli(*args)
        assert ran.returncode == 0, ran.stderr
    return root / name


def offline_series(root: Path, questions: list[dict[str, Any]], name: str = "exp") -> Path:
    """`frozen_experiment`, then its extractive series run to `root`/out: the series folder."""
    from support.cli import run_cli

    experiment = frozen_experiment(root, questions, name)
    ran = run_cli("run", str(experiment), "--series", "extractive", "--out", str(root / "out"))
    assert ran.returncode == 0, ran.stderr
    return root / "out" / name / "extractive"
