"""Hand-written mutants that cosmic-ray cannot make, run against the same tests as its own.

Usage, from the root of a disposable copy (it rewrites src/ files and restores them):
    .venv/bin/python mutation/manual.py --in-a-copy

cosmic-ray changes operators, numbers and booleans, never string literals or method calls, so
the tokenization rule (`text.py`: a regex, a Unicode form, the stopword lists) would go almost
untested, and so would the two faults the trust-gaps issue names (availability from the first
chunk only; ties compared without rounding). Each mutant is one textual replacement; the test
command is the module's `test-command` in mutation/<module>.toml. Prints one line per mutant.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

# (config name, file, what the mutant does, old text, new text)
MUTANTS = [
    ("text", "src/fragbench/text.py", "terms are letters only (digits dropped)",
     'TOKEN_PATTERN = r"[\\p{L}\\p{N}]+"', 'TOKEN_PATTERN = r"[\\p{L}]+"'),
    ("text", "src/fragbench/text.py", "terms split on whitespace only",
     'TOKEN_PATTERN = r"[\\p{L}\\p{N}]+"', 'TOKEN_PATTERN = r"\\S+"'),
    ("text", "src/fragbench/text.py", "accents kept (marks not removed)",
     'MARK_PATTERN = r"\\p{M}"', 'MARK_PATTERN = r"\\p{Zl}"'),
    ("text", "src/fragbench/text.py", "NFC instead of NFKD (accents stay composed)",
     'str.normalize("NFKD")', 'str.normalize("NFC")'),
    ("text", "src/fragbench/text.py", "NFD instead of NFKD (compatibility forms kept)",
     'str.normalize("NFKD")', 'str.normalize("NFD")'),
    ("text", "src/fragbench/text.py", "upper case instead of lower case",
     ".str.to_lowercase()", ".str.to_uppercase()"),
    ("text", "src/fragbench/text.py", "English `s` no longer a stopword",
     '"where", "s", "into"', '"where", "into"'),
    ("text", "src/fragbench/text.py", "French elided `l` no longer a stopword",
     '"le", "la", "les", "l", "un"', '"le", "la", "les", "un"'),
    ("text", "src/fragbench/text.py", "English `will` made a stopword (a homograph)",
     '"would",\n', '"would", "will",\n'),
    ("text", "src/fragbench/text.py", "stopwords kept (anti-join made a semi-join)",
     'how="anti")', 'how="semi")'),
    ("retrieval", "src/fragbench/retrieval/passages.py", "ties compared without rounding",
     'pl.col("score").round(TIE_DECIMALS).alias("_key")', 'pl.col("score").alias("_key")'),
    ("retrieval", "src/fragbench/retrieval/passages.py", "ties to the last chunk in the text",
     'pl.struct(-pl.col("_key"), pl.col("chunk"))', 'pl.struct(-pl.col("_key"), -pl.col("chunk"))'),
    ("availability", "src/fragbench/builtin/availability.py",
     "availability from the first-ranked chunk only",
     'r.filter(pl.col("selected"))', 'r.filter(pl.col("rank") == 1)'),
    ("availability", "src/fragbench/builtin/availability.py",
     "supplied IDs in rank order, not passage order",
     'frame.sort([*keys, "chunk"])', 'frame.sort([*keys, "rank"])'),
]


def main(argv: list[str]) -> int:
    if "--in-a-copy" not in argv:
        print(__doc__)
        return 2
    for config, path, what, old, new in MUTANTS:
        command = tomllib.loads(Path(f"mutation/{config}.toml").read_text())["cosmic-ray"][
            "test-command"]
        source = Path(path)
        original = source.read_text(encoding="utf-8")
        if original.count(old) != 1:
            print(f"NOT APPLICABLE {path}: {what} (the text to replace is not there once)")
            continue
        try:
            source.write_text(original.replace(old, new), encoding="utf-8")
            # No .pyc: a rewrite within the same second could otherwise run stale bytecode.
            result = subprocess.run(shlex.split(command), capture_output=True, timeout=300,
                                    env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        finally:
            source.write_text(original, encoding="utf-8")
        print(f"{'KILLED' if result.returncode else 'SURVIVED':8} {path}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
