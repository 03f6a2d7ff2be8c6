"""The page data's JSON (fragbench.report.pagedata.compact_json, orjson's): the standard
library's text, character for character, for every value a page's data holds, and what
orjson cannot write written by the standard library."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fragbench.report import pagedata

TEXT = st.text(st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    ["</script>", "<!--", "a\u2028b", "\u2029", "\x00\x1f\x7f", '"\\', "\t\n\r\b\f", "é🙂"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=40)


def standard(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_the_page_data_is_the_standard_library_s_text(data: Any) -> None:
    assert pagedata.compact_json(data) == standard(data)
    # The data file's string literal of it, too (what `script` writes).
    text = pagedata.island(data)
    assert pagedata.compact_json(text) == json.dumps(text, ensure_ascii=False)
    assert json.loads(json.loads(pagedata.script("calls-0001", data).decode()[
        len('fragbenchData("calls-0001",'):-3])) == data


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    for data in ([2**64, -(2**63) - 1], {1: "a", "b": 2}, "\ud800", {"x": [10**30]}):
        assert pagedata.compact_json(data) == standard(data)
