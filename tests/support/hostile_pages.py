"""Hostile answers for the HTML pages (issue 14, item 7): what a model or a middlebox could send
to make report.html or the compare page run a script, leave the page or leak a key.

Every payload carries markup in its plain form and in `\\u003c…\\u003e` escapes (text that a
decoder would turn into markup), next to secret-shaped tokens (which make a redactor act) and
the test key in the forms the redactor handles. Each script it holds would mark the page
(`<html data-pwned>`, `window.__pwned`) and navigate to another origin, and each URL it names
points at `ELSEWHERE`, so that a script that ran, a navigation or a request shows.

`script_hostile(server)` scripts a loopback series with them: an answer (with its extracts and
cited IDs) sent as JSON whose `<`, `>` and `&` are `\\u00XX` escapes, a refusal, an answer that
is not JSON, then a model name that stops the series (`changed_model`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import fragbench
from fragbench.redact import MIN_SECRET
from fragbench.testing.loopback import Action, Handler, Server, ok, supplied_lines
from support.cli import run_cli
from support.suite import CANARY_KEY

ELSEWHERE = "http://127.0.0.1:9"
"""Another origin (the discard port: nothing answers there; the browser tests abort it too)."""
TOKENS = ("sk-HOSTILEhostile0123456789abcdefgh", "org-HOSTILEorganization0123")
"""Secret-shaped tokens, of no environment variable: the redactor's patterns catch them."""


def escaped(text: str) -> str:
    """Every character as a `\\uXXXX` escape, as literal text."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def key_forms(key: str = CANARY_KEY) -> dict[str, str]:
    """The key as an answer may echo it, in each form the redactor handles (fragbench.redact):
    as it is, in capitals and in lower case; as `\\u` escapes (lower- and upper-case hex), and
    escaped twice (JSON held in a JSON string); percent-escaped; base64 (alone, and two bytes
    into a longer text in the URL-safe alphabet);
    split by a line break or joined with zero-width spaces; and its halves (each a prefix or
    suffix of at least half of it)."""
    half = (len(key) + 1) // 2
    encoded = key.encode("ascii")
    return {
        "plain": key, "upper": key.upper(), "lower": key.lower(),
        "escaped": escaped(key),
        "escaped-upper-hex": "".join(f"\\u{ord(c):04X}" for c in key),
        "escaped-twice": escaped(key).replace("\\", "\\\\"),
        "percent": "".join(f"%{b:02X}" for b in encoded),
        "base64": base64.b64encode(encoded).decode("ascii"),
        "base64-shifted": base64.urlsafe_b64encode(b"?>" + encoded).decode("ascii"),
        "line-break": key[:half] + "\n" + key[half:],
        "zero-width": "\u200b".join(key),
        "first-half": key[:half], "last-half": key[-half:],
    }


def cut_prefix(key: str = CANARY_KEY) -> str:
    """A piece of the key too short to be found inside a text (under half of it, `MIN_SECRET`
    characters or more), which the redactor finds where it ends a value: a key cut in two."""
    return key[:MIN_SECRET + 2]


def script_js(where: str) -> str:
    """What an injected script would do: mark the page, then leave it. No quote or space, so
    that it survives as an unquoted attribute and through a decoder that keeps quotes."""
    return (f"document.documentElement.dataset.pwned=`{where}`;window.__pwned=`{where}`;"
            f"location=`{ELSEWHERE}/{where}`")


def scripts(where: str) -> str:
    """Markup that runs a script as soon as the page is parsed: an element, two handlers."""
    js = script_js(where)
    return f'<script>{js}</script> <img src=data:, onerror={js}> <svg onload={js}></svg>'


def markup(where: str) -> str:
    """Every kind of hostile markup, each naming `where` (the field it was put in)."""
    js = script_js(where)
    return " ".join([
        f"</script>{scripts(where)}",
        f"<img src={ELSEWHERE}/{where}-img>",
        f'<a href="javascript:{js}">click {where}</a>',
        f'<meta http-equiv="refresh" content="0;url={ELSEWHERE}/{where}-refresh">',
        f'<div style="background:url({ELSEWHERE}/{where}-css)">css</div>',
        f"<style>@import url({ELSEWHERE}/{where}-import.css);"
        f"body{{background:url({ELSEWHERE}/{where}-style)}}</style>",
        f'<iframe src="{ELSEWHERE}/{where}-frame"></iframe>',
        f'<base href="{ELSEWHERE}/{where}-base/">',
        f'"><script>{js}</script><x y="',
    ])


def escaped_markup(where: str) -> str:
    """Markup written as `\\u003c…\\u003e` escapes (quotes left out: a decoder that keeps quotes
    escaped still makes live tags of these)."""
    js = script_js(f"{where}-escaped")
    text = (f"<script>{js}</script> <img src=x onerror={js}> "
            f"<meta http-equiv=refresh content=0;url={ELSEWHERE}/{where}-escaped-refresh>")
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def hostile(where: str) -> str:
    """One hostile value: markup plain and escaped, secret-shaped tokens (one of them escaped,
    which only a decoder sees), and the key in every form."""
    return " ".join([f"[{where}]", markup(where), escaped_markup(where), TOKENS[0],
                     escaped(TOKENS[1]), *key_forms().values(), f"[/{where}]"])


MARKERS = ("<script>", "onerror=", "javascript:", "http-equiv", "url(", "\\u003cscript")
"""What a hostile value holds, and what the page must show as text."""


def _answer(lines: list[tuple[str, str]]) -> dict[str, Any]:
    (first, text), _ = lines[0], lines[1]
    return {"answer": hostile("answer"),
            "citations": [
                {"id": first, "extract": text[:24]},  # valid: a highlight in a fragment
                {"id": f'{first}"><script>{script_js("id")}</script>',
                 "extract": hostile("extract")},
                {"id": hostile("cited-id"), "extract": text[:10]},
            ]}


def escaped_json(handler: Handler, number: int, body: dict[str, Any]) -> None:
    """The hostile answer in a body whose `<`, `>` and `&` are JSON `\\u00XX` escapes, as some
    servers write them: the raw response holds escapes, the decoded answer holds markup."""
    text = json.dumps(_answer(supplied_lines(body)))
    value = handler.server.shape.body(text, number=number, request=body)
    data = (json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026").encode())
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def script_hostile(server: Server) -> None:
    """Calls 1 to 4 of a loopback series: a hostile answer (its extracts and cited IDs too), a
    hostile refusal, a hostile answer that is not JSON, then a hostile model name, which stops
    the series at call 4 (changed_model)."""
    script: dict[int, Action] = {
        0: escaped_json,
        1: ok(refusal=hostile("refusal")),
        2: ok(text=hostile("text")),
        3: ok(model=hostile("model")),
    }
    server.script.update(script)


def hostile_series(experiment: Path, server: Server, name: str = "hostile") -> Path:
    """A loopback series answering with hostile_pages' markup, escapes, tokens and the key,
    stopped at call 4 by a hostile model name; its page written by `fragbench run`."""
    script_hostile(server)
    out = experiment.parent.parent / "outputs"
    result = run_cli("run", str(experiment), "--series", name, "--backend", "openai",
                     "--out", str(out),
                     env={"OPENAI_API_KEY": CANARY_KEY, "OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 3 and "changed_model" in result.stderr, result.stderr
    return out / "protocol-1.0" / name


# -- What a written page allows ------------------------------------------------------------------

PAGE_JS = Path(fragbench.__file__).parent / "report" / "templates" / "page.js"
"""The pages' one script, as committed (read here, not through the code under test)."""


def page_js_source() -> str:
    """The only script-src a page may have: `'sha256-…'` of page.js's bytes, and
    `'strict-dynamic'` (the scripts page.js adds itself: its data files beside the page)."""
    digest = hashlib.sha256(PAGE_JS.read_bytes()).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}' 'strict-dynamic'"


class _Scripts(HTMLParser):
    """Every <script> element's text (`scripts`; a `type="application/json"` one, data that
    never runs, in `islands`), and every Content-Security-Policy a <meta> sets."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[str] = []
        self.islands: list[str] = []
        self.policies: list[str] = []
        self._in_script = self._island = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        given = {k: v or "" for k, v in attrs}
        if tag == "script" and given.get("type") == "application/json":
            self.islands.append("")  # data, never run: report.html's calls
            self._in_script = self._island = True
        elif tag == "script":
            self.scripts.append("")
            self._in_script, self._island = True, False
        elif tag == "meta" and given.get("http-equiv", "").lower() == \
                "content-security-policy":
            self.policies.append(given.get("content", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            if self._island:
                self.islands[-1] += data
            else:
                self.scripts[-1] += data


def islands(page: str) -> list[str]:
    """The text of the page's `<script type="application/json">` elements (data, not run)."""
    parser = _Scripts()
    parser.feed(page)
    parser.close()
    return parser.islands


def scripts_and_policy(page: str) -> tuple[list[str], dict[str, str]]:
    """The page's script elements that run (their text; a JSON data element is not one) and
    its one policy, directive -> sources."""
    parser = _Scripts()
    parser.feed(page)
    parser.close()
    assert len(parser.policies) == 1, parser.policies
    directives = (d.strip().split(None, 1) for d in parser.policies[0].split(";") if d.strip())
    return parser.scripts, {d[0]: d[1] if len(d) > 1 else "" for d in directives}
