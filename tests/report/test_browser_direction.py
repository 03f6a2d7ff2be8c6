"""Issue 26: each call card shows its question, and text from the corpus and the model is laid
out in its own direction in report.html.

An offline series of one HotpotQA-format question whose paragraphs are Arabic, opened in
headless Chromium: every call card shows the question it asked (from questions.parquet);
every question, fragment, answer and extract carries `dir="auto"`, so the browser lays the
Arabic out right to left, while the page's own words stay left to right.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.browser import open_page
from support.hotpotqa_data import offline_series

pytestmark = pytest.mark.slow

ARABIC = [
    {"_id": "5a8b57f25542995d1e6f1399", "answer": "نعم",
     "question": "هل ولد الكاتب في القاهرة؟",
     "supporting_facts": [["الكاتب", 0]],
     "context": [
         ["الكاتب", ["ولد الكاتب في القاهرة عام ١٩١١.", " كتب روايات كثيرة عن المدينة."]],
         ["المدينة", ["القاهرة هي عاصمة مصر.", " يعيش فيها ملايين الناس."]],
     ],
     "type": "bridge", "level": "easy"},
]


def test_corpus_and_model_text_is_laid_out_in_its_own_direction(chromium: Any,
                                                                 tmp_path: Path) -> None:
    page_file = offline_series(tmp_path, ARABIC, "rtl") / "report.html"
    with open_page(chromium, page_file) as opened:
        page = opened.page
        page.wait_for_selector("article.call li.fragment")
        seen = page.evaluate("""() => [...document.querySelectorAll(
            'article.call li.fragment, article.call .answer, article.call q.extract, '
            + 'article.call .question-text')]
            .map(e => [e.className, e.dir, getComputedStyle(e).direction, e.textContent])""")
        own = page.evaluate("() => getComputedStyle(document.querySelector('h1')).direction")
        asked = page.evaluate("() => [...document.querySelectorAll('article.call')].map("
                              "a => a.querySelector('p.question')?.textContent)")
    assert seen and {c.split()[0] for c, *_ in seen} >= {"fragment", "answer", "extract",
                                                         "question-text"}
    assert len(asked) == 4 and set(asked) == {"Question: " + ARABIC[0]["question"]}
    for cls, attribute, direction, text in seen:
        assert attribute == "auto", (cls, text)
        assert direction == "rtl", (cls, text)  # Arabic first: right to left
    assert own == "ltr"
