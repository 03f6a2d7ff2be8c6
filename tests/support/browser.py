"""Helpers for the browser tests: the system Chromium driven by Playwright, pages opened with
every request recorded and blocked, and the two series the pages are read from.

Imported by `tests/report/test_browser.py` (whose session fixture wraps `chromium_browser`) and by
`docs/screenshots/make_screenshots.py`, which builds the same series in the same browser.

The browser is Debian's `chromium` package, not a Playwright download: `make test` installs it
as root where it is missing, and the tests skip, with the reason in pytest's `-ra` summary, only
where no Chromium can be found or started.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from fragbench.testing.loopback import Server, http_error, ok
from support.suite import ROOT

CHROMIUM_NAMES = ("chromium", "chromium-browser")
NO_CHROMIUM = ("no Chromium: install Debian's chromium package (make test does this as root)")
PATIENCE_MS = 120_000
"""Playwright's wait for one action. Generous: a wait that a loaded machine can hit would fail
for the wrong reason; the pages are local files and make no request, so nothing is awaited but
Chromium itself."""


def find_chromium() -> str | None:
    """The system Chromium on PATH (Debian names it `chromium`, Ubuntu's snap shim
    `chromium-browser`), or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def launch_args() -> list[str]:
    """Chromium refuses to run its sandbox as root (CI runs `make test` as root)."""
    return ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """The system Chromium under Playwright; raises `pytest.skip.Exception` with the reason
    when there is none or it cannot start (the only two reasons a browser test may skip)."""
    path = find_chromium()
    if path is None:
        raise pytest.skip.Exception(NO_CHROMIUM)
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=path, args=launch_args(),
                                                 timeout=PATIENCE_MS)
        except Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise pytest.skip.Exception(f"Chromium at {path} cannot start: {first}") from None
        try:
            yield browser
        finally:
            browser.close()


@attrs.define
class Opened:
    """A page opened from a file, every request it made, and every way it could have left
    itself: a frame navigated (the first load included), a window opened, a dialog shown.
    Its own data files (`own`: scripts its data folder beside it holds, which page.js loads)
    are the one thing it may ask for besides itself."""

    page: Any
    url: str
    requests: list[str]
    blocked: list[str]
    folder: str = ""
    """The URL of the folder the page is in, ending in `/`."""
    navigations: list[str] = attrs.field(factory=list)
    popups: list[str] = attrs.field(factory=list)
    dialogs: list[str] = attrs.field(factory=list)
    console: list[str] = attrs.field(factory=list)
    """What the page logged; Chromium logs each script the Content-Security-Policy refused."""

    def network(self) -> list[str]:
        """Every request other than the page itself and its own data files (`own`). data:
        URLs (the embedded figures) are content carried inside the page, not a request to
        anywhere: they are left out here, explicitly, should Chromium ever report them."""
        return [u for u in self.requests + self.blocked
                if u != self.url and not u.startswith("data:") and u not in self.own()]

    def own(self) -> list[str]:
        """The page's data files it asked for: a script in a folder beside the page named
        `<page stem>-data/<digest>` (fragbench.report.pagedata), and nothing else there."""
        return [u for u in self.requests if own_data_file(self.folder, u)]

    def elsewhere(self) -> list[str]:
        """Every way the page went anywhere but itself: requests, a frame (main or not) that
        navigated to or now shows another URL, a window opened, a dialog shown."""
        frames = [f.url for f in self.page.frames]

        def away(u: str) -> bool:
            # The page's own URL with another fragment is the page itself: report.html keeps
            # its filter state there (#?case=…).
            return u.split("#", 1)[0] != self.url
        return ([f"request {u}" for u in self.network()]
                + [f"navigation {u}" for u in self.navigations if away(u)]
                + [f"frame {u}" for u in frames if away(u)]
                + [f"window {u}" for u in self.popups]
                + [f"dialog {d}" for d in self.dialogs]
                + ([f"page url {self.page.url}"] if away(self.page.url) else []))


OWN_DATA_FILE = re.compile(r"[^/]+-data/[0-9a-f]{16}/(calls|cells|search)-[0-9]{4}\.js")


def own_data_file(folder: str, url: str) -> bool:
    """Whether `url` is one of a page's data files: in `folder` (the page's), in a folder named
    `<stem>-data/<digest>`, a calls, cells or search script (what page.js may load)."""
    return url.startswith(folder) and OWN_DATA_FILE.fullmatch(url[len(folder):]) is not None


def ready(page: Any) -> None:
    """Wait until the page's list of calls or cells is drawn and waits for no data file (the
    page marks its list aria-busy while it does)."""
    page.wait_for_function(
        "() => { const l = document.querySelector('#call-list, #cell-list'); return !l"
        " || l.dataset.error || (l.dataset.drawn && !l.hasAttribute('aria-busy')); }")


@contextmanager
def open_page(browser: Any, path: Path, *, javascript: bool = True,
              viewport: tuple[int, int] = (1280, 900), fragment: str = "") -> Iterator[Opened]:
    """Open `path` as a file:// URL in a fresh context, once its first page of items is drawn
    (`ready`). Every request is recorded (`page.on("request")`), and every request but the
    page's own URL, its own data files (`own_data_file`) and data: URLs is also routed to an
    abort, so that a page that does reach out fails here and nothing leaves the machine while
    it does. `fragment` (`#call-…`) is the URL's fragment as the page opens."""
    url = path.resolve().as_uri()
    folder = path.resolve().parent.as_uri() + "/"
    context = browser.new_context(java_script_enabled=javascript,
                                  viewport={"width": viewport[0], "height": viewport[1]})
    context.set_default_timeout(PATIENCE_MS)
    requests: list[str] = []
    blocked: list[str] = []

    def route(route: Any) -> None:
        asked = route.request.url
        if asked == url or asked.startswith("data:") or own_data_file(folder, asked):
            route.continue_()
        else:
            blocked.append(asked)
            route.abort()

    try:
        context.route("**/*", route)
        page = context.new_page()
        opened = Opened(page, url, requests, blocked, folder)
        page.on("request", lambda request: requests.append(request.url))
        page.on("framenavigated", lambda frame: opened.navigations.append(frame.url))
        page.on("console", lambda message: opened.console.append(message.text))
        context.on("page", lambda other: opened.popups.append(other.url))

        def dialog(shown: Any) -> None:
            opened.dialogs.append(shown.message)
            shown.dismiss()

        page.on("dialog", dialog)
        page.goto(url + fragment, wait_until="load")
        if javascript:
            ready(page)
        yield opened
    finally:
        context.close()


# -- The series the pages are made from ---------------------------------------------------------

def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words (runs of non-space), so that an extract cut from them is
    a verbatim substring whatever spaces the sentence holds (no-break ones included)."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def cut(text: str, first: int, last: int) -> str:
    """Words first..last-1 of `text`, verbatim."""
    spans = word_spans(text)
    last = min(last, len(spans))
    return text[spans[first][0]:spans[last - 1][1]]


def overlapping(lines: list[tuple[str, str]]) -> dict[str, Any]:
    """Citations whose extracts overlap in one fragment (valid, valid, misattributed), two
    identical ones, and an ID of the case this call was not given."""
    (id0, text0), (id1, _), (id2, text2) = lines[0], lines[1], lines[2]
    given = {fid for fid, _ in lines}
    absent = [f"F{k}" for k in range(1, 7) if f"F{k}" not in given]
    citations = [
        {"id": id0, "extract": cut(text0, 0, 6)},
        {"id": id0, "extract": cut(text0, 3, 9)},
        {"id": id1, "extract": cut(text0, 5, 11)},  # in F-first, not in the cited one
        {"id": id2, "extract": cut(text2, 1, 4)},
        {"id": id2, "extract": cut(text2, 1, 4)},  # the same extract twice: one segment
    ]
    if absent:
        citations.append({"id": absent[0], "extract": "anything at all"})
    return {"answer": "Overlapping extracts.", "citations": citations}


def odd(lines: list[tuple[str, str]]) -> dict[str, Any]:
    """An unknown ID, an empty extract, an extract found nowhere, and markup in the answer
    (which the page must show as text, never run)."""
    fid = lines[0][0]
    return {
        "answer": "<b>bold?</b> <script>document.documentElement.dataset.pwned = '1'</script>"
                  " & <img src=x onerror=\"document.documentElement.dataset.pwned = '2'\">",
        "citations": [
            {"id": "F99", "extract": cut(lines[0][1], 0, 3)},
            {"id": fid, "extract": ""},
            {"id": fid, "extract": "words that appear in no supplied sentence"},
        ],
    }


def repeated(lines: list[tuple[str, str]]) -> dict[str, Any]:
    """An extract that occurs twice in its own fragment (marked at its first occurrence), and
    one cited under an ID whose fragment lacks it while two others hold it (marked in the
    first of them)."""
    citations = []
    for fid, text in lines:
        twice = [w for w in re.findall(r"\w{3,}", text) if text.count(w) >= 2]
        if twice:
            citations.append({"id": fid, "extract": twice[0]})
            break
    words = [w for _, text in lines for w in re.findall(r"\w{3,}", text)]
    for word in words:
        holders = [fid for fid, text in lines if word in text]
        lacking = [fid for fid, text in lines if word not in text]
        if len(holders) >= 2 and lacking:
            citations.append({"id": lacking[-1], "extract": word})
            break
    return {"answer": "Repeated words.", "citations": citations}


def crafted(make: Callable[[list[tuple[str, str]]], dict[str, Any]]) -> Any:
    """A loopback action answering with `make(supplied sentences)` as the structured answer."""
    from fragbench.testing.loopback import supplied_lines

    def act(handler: Any, number: int, body: dict[str, Any]) -> None:
        ok(text=json.dumps(make(supplied_lines(body))))(handler, number, body)
    return act


def script_stopped(server: Any) -> None:
    """What the loopback server answers for the stopped series: every citation reason, overlaps,
    a refusal and an answer cut at the output limit in the first nine calls, then an HTTP 500
    at call 10, which stops the series: calls 11 to 72 are never sent."""
    from fragbench.testing.loopback import RESPONSES

    server.script[0] = crafted(overlapping)
    server.script[1] = crafted(odd)
    server.script[2] = crafted(repeated)
    server.script[3] = ok(**RESPONSES.refused("I cannot answer from these sentences."))
    server.script[4] = ok(**RESPONSES.incomplete())
    server.script[9] = http_error(500, "The loopback server failed on purpose.")


def workspace(root: Path) -> Path:
    """A copy of the experiments and their corpus under `root`; returns protocol 1.0's folder."""
    shutil.copytree(ROOT / "experiments", root / "experiments")
    shutil.copytree(ROOT / "corpus", root / "corpus")
    return root / "experiments" / "protocol-1.0"


def stopped_series(experiment: Path, name: str = "loopback-stopped") -> Path:
    """Run protocol 1.0 with the openai backend against a loopback server scripted by
    `script_stopped`; the ledger store must already point somewhere disposable
    (FRAGBENCH_LEDGER_DIR). Named for what it is, so that a screenshot of its page cannot pass
    for a model's results: the answers are scripted."""
    from support.cli import run_cli
    from support.suite import CANARY_KEY


    outputs = experiment.parent.parent / "outputs"
    with Server() as server:
        script_stopped(server)
        result = run_cli("run", str(experiment), "--series", name, "--backend", "openai",
                         "--out", str(outputs),
                         env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert "stopped at call 10" in result.stderr, result.stderr
    return outputs / "protocol-1.0" / name


def settled(opened: Opened) -> dict[str, Any]:
    """Once nothing is loading any more: what the page holds (DOM_JS)."""
    opened.page.wait_for_load_state("networkidle")
    dom: dict[str, Any] = opened.page.evaluate(DOM_JS)
    return dom


def text_of(page: Any, selector: str) -> str | None:
    found: str | None = page.evaluate(
        "s => { const e = document.querySelector(s); return e ? e.textContent : null; }",
        selector)
    return found


DOM_JS = """() => {
  const all = [...document.querySelectorAll('*')];
  const own = ['charset', 'Content-Security-Policy', 'viewport', 'color-scheme', 'generator'];
  return {
    marks: [document.documentElement.dataset.pwned ?? null, window.__pwned ?? null],
    scripts: [...document.scripts].filter(s => s.type !== 'application/json').map(s => s.text),
    islands: [...document.scripts].filter(s => s.type === 'application/json').map(s => s.id),
    handlers: all.flatMap(e => [...e.attributes].filter(a => a.name.startsWith('on'))
      .map(a => e.tagName + ' ' + a.name)),
    links: all.flatMap(e => ['src', 'href', 'action', 'formaction', 'srcset', 'data', 'poster']
      .filter(n => e.hasAttribute(n)).map(n => e.getAttribute(n)))
      .filter(u => !u.startsWith('#') && !u.startsWith('data:image/')),
    metas: [...document.querySelectorAll('meta')].map(m => m.getAttribute('http-equiv')
      ?? m.getAttribute('name') ?? (m.hasAttribute('charset') ? 'charset' : '?'))
      .filter(m => !own.includes(m)),
    foreign: all.filter(e => ['IFRAME', 'FRAME', 'BASE', 'LINK', 'OBJECT', 'EMBED', 'svg',
      'A'].includes(e.tagName) && !(e.tagName === 'A' && (e.getAttribute('href') ?? '')
      .startsWith('#'))).map(e => e.outerHTML.slice(0, 120)),
    styles: document.querySelectorAll('style').length,
    styled: all.filter(e => e !== document.documentElement && e.hasAttribute('style'))
      .map(e => e.outerHTML.slice(0, 120)),
    filtersShown: !(document.querySelector('form.filters')?.hidden ?? true),
  };
}"""
