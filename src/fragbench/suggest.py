"""The nearest known name for a misspelt one: what a refusal of an unknown key suggests.

A config key, table or parameter that fragbench does not read is refused, never ignored (a typo
in a pre-registered plan would otherwise become a default). The refusal names the closest known
name, so that the fix is one edit.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name` (difflib's ratio of at least 0.6), or None."""
    found = difflib.get_close_matches(name, list(known), n=1)
    return found[0] if found else None


def unknown(name: str, known: Iterable[str], prefix: str = "",
            elsewhere: Iterable[str] = ()) -> str:
    """`prefix+name (did you mean prefix+x?)`: how one unknown name is shown. `known` are the
    names valid where `name` stands (in the table `prefix`, e.g. `sensitivity.`); `elsewhere`,
    qualified names valid in other places (e.g. `retrieval.chunk_size`), suggested when nothing
    where it stands is close. With no close name at all, the valid names are listed."""
    known = list(known)
    close = nearest(name, known)
    if close is not None:
        return f"{prefix}{name} (did you mean {prefix}{close}?)"
    by_leaf = {q.rpartition(".")[2]: q for q in elsewhere}
    leaf = nearest(name, by_leaf)
    if leaf is not None:
        return f"{prefix}{name} (did you mean {by_leaf[leaf]}?)"
    return f"{prefix}{name} (the known names there are {', '.join(known) or 'none'})"
