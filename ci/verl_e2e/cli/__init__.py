"""CLI: thin command modules; each parses its arguments and calls one stage function.

`main` builds the parser, dispatches and turns errors into one line and an exit code (2 for bad
input); `run_cmd` (image, prefetch, run-cell), `base_cmd`, `github_cmd` (trigger, gate, report,
react, reply, compare, fork-notice), `inspect_cmd` (validate, families, evidence, judge) and
`surface_cmd` hold the commands. The top of the house: it may import every stage, none imports it.
"""
