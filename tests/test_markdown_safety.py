"""Text a cell or a plan wrote is quoted literally wherever the bot shows it.

A cell runs the PR's code, so its log lines, exception messages, culprit frames, limitations and
records are another party's words. Shown as live markdown at the top of a maintainer's PR they
could bold, link, mention a team, reference another repository's issue or open HTML. Every value
here carries the word EVIL; rendered as GitHub renders (CommonMark, tables, raw HTML), no text
node outside `code`/`pre` may hold it, no link but the run's own may appear, and no element but
the report's own structure.
"""

from __future__ import annotations

from dataclasses import replace
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from verl_e2e.config.compat import KNOWN
from verl_e2e.judge.verdict import Deliverable, Verdict
from verl_e2e.report.comment import Context, check_run, render
from verl_e2e.report.fullsummary import render_full
from verl_e2e.report.markup import block, html_code, span
from verl_e2e.report.notices import refusal

from .test_publish import verdict

HOSTILE = (
    "EVIL `tick` ``two`` **bold** _em_ https://evil.example/x www.evil.example @org/team @everyone "
    "other/repo#1 #2 <details><summary>EVIL</summary> </code><img src=x onerror=alert(1)> [link](https://evil.example) "
    "| pipe \\| ``` fence\nsecond line EVIL ~~~ :tada: </details>"
)
RUN_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/actions/runs/1"
OURS = {"Megatron-Core:", "Not covered", "Not run (GPU budget)", "Levels not run:"}  # our bold words
STRUCTURE = {"p", "h2", "h3", "a", "code", "pre", "table", "thead", "tbody", "tr", "th", "td", "details"}
STRUCTURE |= {"summary", "sub", "blockquote", "strong", "ul", "li", "br"}


class _Walk(HTMLParser):
    """Records tags, link targets, bold text and any text outside code/pre."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.bold: list[str] = []
        self.exposed: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [v or "" for k, v in attrs if k == "href"]
        if tag not in ("br", "img", "hr"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if "strong" in self.stack:
            self.bold.append(data)
        if not {"code", "pre"} & set(self.stack):
            self.exposed.append(data)


def _hostile_verdict(result: str) -> Verdict:
    base = verdict("L0-lora-ddp-qwen", result)
    return replace(
        base,
        cell_id=f"L0-{HOSTILE}",
        model=HOSTILE,
        headline=f"{result} - Level 0 of x: RuntimeError: {HOSTILE} (in code this PR changed: `src/{HOSTILE}.py:3` "
        "in `f`)",
        deliverables=[Deliverable("verl Megatron backend run", "Fail", HOSTILE)],
        key_lines=[HOSTILE, "training/global_step:1"],
        limitations=[HOSTILE, KNOWN + HOSTILE, "Megatron-Core: " + HOSTILE],
        follow_ups=[HOSTILE],
        command=HOSTILE,
        exception=f"RuntimeError: {HOSTILE}",
        repos={"verl": {"commit": HOSTILE}, "image": {"tag": HOSTILE, "base": HOSTILE}},
        coverage={"executed": [HOSTILE], "not_executed": [], "summary": HOSTILE},
    )


CTX = Context(
    repo="NVIDIA-NeMo/Megatron-Bridge",
    pr=1,
    sha="e" * 40,
    run_url=RUN_URL,
    artifacts_url=RUN_URL + "#artifacts",
    job_failures=[HOSTILE],
    skipped={"5": HOSTILE, HOSTILE: HOSTILE},
    uncovered={"4": [HOSTILE]},
    deferred=[{"id": HOSTILE, "gpu_minutes": HOSTILE, "request": HOSTILE}],
)
CELLS = [_hostile_verdict("Fail"), _hostile_verdict("Pass"), _hostile_verdict("Blocked")]
OUTPUTS = {
    "comment": lambda: render(CELLS, CTX),
    "job summary": lambda: render_full(CELLS, CTX),
    "check run": lambda: str(check_run(CELLS, CTX)["output"]["summary"]),
    "refusal": lambda: refusal(f"`{HOSTILE}` is not valid"),
}


def _rendered(text: str) -> _Walk:
    walk = _Walk()
    walk.feed(MarkdownIt("commonmark").enable("table").render(text))
    return walk


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_cell_text_renders_nothing(name: str) -> None:
    walk = _rendered(OUTPUTS[name]())
    exposed = [t for t in walk.exposed if "EVIL" in t or "evil" in t or "@org" in t or "repo#1" in t]
    assert not exposed, exposed
    assert set(walk.tags) <= STRUCTURE, set(walk.tags) - STRUCTURE
    assert set(walk.hrefs) <= {RUN_URL, RUN_URL + "#artifacts"}, walk.hrefs
    assert {b.strip() for b in walk.bold} <= OURS, walk.bold


def test_the_comment_keeps_its_shape_with_hostile_cells() -> None:
    text = render(CELLS, CTX)
    walk = _rendered(text)
    assert walk.tags.count("details") == 3  # the Fail's block, the Blocked's block, the limitations
    assert walk.tags.count("tr") == 1 + len(CELLS)
    assert "https://evil.example/x" in text and "@org/team" in text  # quoted, not dropped


@pytest.mark.parametrize(
    ("helper", "text"),
    [(span, "a ` b"), (span, "``"), (span, "`edge`"), (block, "```\n````\nx"), (html_code, "</code>@x<b>")],
)
def test_the_quoting_helpers_keep_the_text_whole(helper: object, text: str) -> None:
    walk = _rendered(helper(text))  # type: ignore[operator]
    assert "".join(walk.exposed).strip() == ""
    shown = "".join(_CodeText.of(helper(text)))  # type: ignore[operator]
    assert shown.strip() == (text if helper is block else " ".join(text.split())).strip()


class _CodeText(HTMLParser):
    """The text inside code elements, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.inside = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:  # noqa: ARG002 - HTMLParser's
        self.inside += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self.inside -= tag == "code"

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.text.append(data)

    @classmethod
    def of(cls, markdown: str) -> list[str]:
        parser = cls()
        parser.feed(MarkdownIt("commonmark").render(markdown))
        return parser.text


def test_changed_lines_no_cell_executes_are_said_once_and_literally() -> None:
    """The plan's note quotes the PR's own code (a branch condition): shown, but never as markdown."""
    from verl_e2e.report.comment import render
    from verl_e2e.report.sections import Context

    note = "src/megatron/bridge/x.py:12 (under `if self.cp.size() > 1 and **bold** @org/team`; no cell runs them)"
    body = render([], Context(unexecuted=[note]))
    assert "**Changed lines no cell executes**" in body
    line = next(x for x in body.splitlines() if "x.py:12" in x)
    assert line.startswith("- `") and line.rstrip().endswith("`"), line


def test_the_plan_summary_quotes_its_warnings_literally() -> None:
    """Plan warnings can carry the PR's own code (a branch condition, an architecture name)."""
    from verl_e2e.plan.contract import _literal

    hostile = "x.py:3 (under `if a > 1` **bold** [link](https://evil) @org/team other/repo#1)"
    quoted = _literal(hostile)
    assert quoted.startswith("`` ") and quoted.endswith(" ``") and "\n" not in _literal("a\nb")
