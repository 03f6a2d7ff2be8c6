"""The corpus: teaching cases and columnar corpus folders, read and checked.

In: files on disk (a case's TOML, a columnar folder's Parquet, a dataset to import). Out:
`Case` records and Polars frames of sentences, facts and questions (`sentences_frame`,
`facts_frame`, `questions_frame`, `cases_frame`) keyed by the passage key
(`fragbench.columns.PASSAGE`). The first stage: it imports no other stage.

- `cases`: the TOML teaching cases and the frames built from them (`load_corpus`, `Case`);
- `columnar`: corpus folders of Parquet tables, for thousands of cases (`GROUP_KEY`);
- `ids`: the rules for a case, fact or group ID;
- `importers`: HotpotQA and JSON lines in, columnar folders out.
"""

from __future__ import annotations

from fragbench.lazy import reexport

__getattr__, __dir__ = reexport(__name__, {
    "Case": "cases",
    "Passage": "cases",
    "PASSAGE_SEPARATOR": "cases",
    "load_corpus": "cases",
    "sentences_frame": "cases",
    "facts_frame": "cases",
    "questions_frame": "cases",
    "cases_frame": "cases",
    "GROUP_KEY": "columnar",
})
