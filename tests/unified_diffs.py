"""A one-hunk unified diff as `git diff` prints it, for tests that plan or parse a change from its text:
the header names the file, the blob ids are placeholders, and the hunk header's counts come from the
lines (" " context, "-" removed, "+" added)."""

from __future__ import annotations


def one_hunk(path: str, header: str, lines: list[str], start: int = 1) -> str:
    old = sum(1 for x in lines if x[:1] in " -")
    new = sum(1 for x in lines if x[:1] in " +")
    return (
        f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{start},{old} +{start},{new} @@ {header}\n" + "\n".join(lines) + "\n"
    )
