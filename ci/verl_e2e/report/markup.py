"""Text from a run dir or a plan, shown in markdown exactly as written: nothing in it ever renders.

A cell's log lines, exception messages, culprit names, limitations and the plan's reasons are
data another party wrote (the PR's code runs in the cell). GitHub renders a comment's markdown and
then links mentions, `owner/repo#N` references and bare URLs in every text node except those inside
`code` and `pre`. So such text is shown only inside a code span, a fenced block or an HTML `<code>`
element, with a fence longer than any backtick run inside it: no escaping to get wrong, no
character dropped, and the reader can copy the exact text.
"""

from __future__ import annotations

import html
import re

_TICKS = re.compile(r"`+")


def _longest_tick_run(text: str) -> int:
    return max((len(m.group(0)) for m in _TICKS.finditer(text)), default=0)


def span(text: object, *, table: bool = True) -> str:
    """One line of text as a code span; "" stays "". In a table cell a pipe is escaped, which GFM
    undoes inside the span (it splits the row on pipes before it reads spans); outside a table it
    is left as is, since the backslash would show."""
    flat = " ".join(str(text).split())
    if not flat:
        return ""
    if table:
        flat = flat.replace("|", "\\|")
    fence = "`" * (_longest_tick_run(flat) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def block(text: str, info: str = "text") -> str:
    """Lines as a fenced code block whose fence no line inside can close."""
    fence = "`" * max(3, _longest_tick_run(text) + 1)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def html_code(text: object) -> str:
    """Text inside HTML (a `<summary>`): escaped, and in `<code>`, where GitHub links no mention."""
    flat = " ".join(str(text).split())
    return "<code>" + html.escape(flat, quote=True).replace("@", "&#64;") + "</code>"
