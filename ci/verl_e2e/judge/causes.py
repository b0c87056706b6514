"""Causes that a log's format names outright: a config key verl's schema does not know, an interrupt,
a compiled extension built against another library, a failed import, Bridge's HF weight import.

`classify` decides the class from where the run stopped; these rules decide what the verdict says
about a cause whose text is unmistakable, wherever in the log it surfaced, so that the follow-up
fits it: the config key to fix (not "finalize the provider"), the signal that stopped the run (not
a failure of the PR's code), the shared object to rebuild, the module an import expected a name in.
Pure: strings and traceback blocks in, strings out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from verl_e2e.judge.tracebacks import Block

# omegaconf's and Hydra's ways of naming the key, most specific first: the dotted path of `full_key:`,
# Hydra's override, then the bare key of the exception's own message
_KEY_FORMS = (
    re.compile(r"^\s*full_key: ([\w.\[\]-]+)\s*$"),
    re.compile(r"Could not override '([^']+)'"),
    re.compile(r"Key '([^']+)' (?:is )?not in"),
    re.compile(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'"),
    re.compile(r"Missing mandatory value: ([\w.\[\]-]+)"),
)
# where a verl config is built from its YAML: Hydra's instantiate, omegaconf's structured merge, verl's own
CONFIG_CODE = ("/hydra/", "/omegaconf/", "/verl/utils/config.py", "/verl/workers/config/", "/verl/trainer/config/")
KEYWORD = re.compile(r"__init__\(\) got an unexpected keyword argument '\w+'")
INTERRUPTS = {
    "KeyboardInterrupt": "Ctrl-C: KeyboardInterrupt",
    "TaskCancelledError": "a cancelled Ray task: TaskCancelledError",
}
_SIGNAL = re.compile(
    r"got signal: (\d+)|Received (\d+) death signal|(?:[Rr]eceived|[Cc]aught|[Gg]ot)(?: signal:?)? (SIG[A-Z]+)"
    r"|(SIG[A-Z]+) received|line \d+:\s+\d+ (Terminated|Interrupt|Hangup)\b"
)
SIGNALS = {"1": "SIGHUP", "2": "SIGINT", "15": "SIGTERM"}
SHELL_WORDS = {"Hangup": "SIGHUP", "Interrupt": "SIGINT", "Terminated": "SIGTERM"}  # how bash reports a job's signal
_UNDEFINED = re.compile(r"(\S+\.so(?:\.[\d.]+)?): undefined symbol: (\S+)")
UNDEFINED_HINT = (
    "the compiled extension {library} does not match the libraries it loads (undefined symbol {symbol}): it "
    "was built against another torch/CUDA; rebuild or reinstall it for this image"
)
_CANNOT_IMPORT = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_NO_MODULE = re.compile(r"No module named '([^']+)'")
# Bridge's HF -> Megatron weight import (AutoBridge.load_hf_weights -> load_weights_hf_to_megatron ->
# a param mapping's hf_to_megatron) and vanilla mbridge's load_weights: where weights meet the built model
WEIGHT_IMPORT = frozenset(
    {"load_hf_weights", "load_weights_hf_to_megatron", "hf_to_megatron", "load_weights", "_load_weights"}
)
WEIGHTS_HINT = (
    "Bridge's HF->Megatron weight import failed while building the model: the checkpoint's tensors and the "
    "model the provider built disagree (a shape, or a name the param mapping expects); compare the provider's "
    "shape fields (hidden_size, num_attention_heads, num_query_groups, kv_channels, ffn_hidden_size, "
    "vocab_size) and the param mappings with this model's config.json and weight names"
)


def config_key(texts: Iterable[str]) -> str | None:
    """The config key an omegaconf/Hydra error names, in its most specific form found in `texts`."""
    lines = [line for text in texts for line in text.splitlines()]
    for form in _KEY_FORMS:
        for line in lines:
            m = form.search(line)
            if m:
                return ".".join(m.groups()) if form.groups > 1 else m.group(1)
    return None


def config_hint(key: str | None) -> str:
    """What to do about a key the config schema rejected."""
    named = f"`{key}`" if key else "a key (not shown in the log)"
    return (
        f"the configuration was rejected: {named} is not in verl's config schema; fix the cell's Hydra "
        "override (a new key needs `+key=value`) or run the verl version the override was written for"
    )


def fill(hint: str, texts: Iterable[str]) -> str:
    """A signature's hint with its placeholders filled from the log's lines: `{key}`, the config key
    named; `{library}` and `{symbol}`, the shared object and the symbol it lacks."""
    texts = list(texts)
    if "{key}" in hint:
        key = config_key(texts)
        hint = hint.replace("{key}", f"`{key}`" if key else "a key the log does not show")
    if "{library}" in hint or "{symbol}" in hint:
        found = next((m for t in texts if (m := _UNDEFINED.search(t))), None)
        lib, symbol = found.groups() if found else ("(not shown)", "(not shown)")
        hint = hint.replace("{library}", f"`{lib.rsplit('/', 1)[-1]}`").replace("{symbol}", f"`{symbol[:80]}`")
    return hint


def is_config_schema(exception: Mapping[str, str], root: Block | None) -> bool:
    """A dataclass that refused a keyword while Hydra or omegaconf built a verl config from its YAML: the
    raise is in config code (the generated `__init__` has no file of its own)."""
    if exception["type"] != "TypeError" or not KEYWORD.search(exception["message"]):
        return False
    paths = [path for _, path in (root.frames if root else []) if not path.startswith("<")]
    return bool(paths) and any(part in paths[-1] for part in CONFIG_CODE)


def interrupt(exception: Mapping[str, str] | None, hits: Mapping[str, str], interrupted: bool) -> str | None:
    """What interrupted the run, if the log says it was interrupted ("Ctrl-C: KeyboardInterrupt")."""
    etype = exception["type"] if exception else ""
    if etype == "CancelledError" and interrupted:  # asyncio tasks a Ctrl-C cancelled (vLLM's server, verl's loops)
        return f"{INTERRUPTS['KeyboardInterrupt']}, its asyncio tasks cancelled"
    if etype in INTERRUPTS:
        cancelled = INTERRUPTS[etype]
        return f"{cancelled}, after a Ctrl-C" if interrupted and etype != "KeyboardInterrupt" else cancelled
    if etype == "SignalException" and exception is not None:
        name = signal_name(exception["message"])
        return f"{name}: torch elastic's SignalException" if name else None
    for line in hits.values():
        name = signal_name(line)
        if name:
            return name
    return INTERRUPTS["KeyboardInterrupt"] if interrupted else None


def signal_name(text: str) -> str | None:
    """SIGINT, SIGTERM or SIGHUP named by a line (`got signal: 2`, `Received SIGINT`); None for others."""
    m = _SIGNAL.search(text)
    if not m:
        return None
    number, name = m.group(1) or m.group(2), m.group(3) or m.group(4) or SHELL_WORDS.get(m.group(5) or "")
    name = SIGNALS.get(number, "") if number else name
    return name if name in SIGNALS.values() else None


def interrupted_by(line: str) -> str:
    """The interrupt an interrupt signature's line names: its signal, else the line itself (a
    scheduler's cancel notice says more than any summary of it)."""
    return signal_name(line) or f"`{line.strip()[:120]}`"


def interrupt_hint(cause: str) -> str:
    return f"rerun; the run was interrupted (by {cause}), not stopped by the PR's code"


def missing_hint(message: str) -> str:
    """A missing module, shared library, symbol or name, named, with what to install."""
    if _UNDEFINED.search(message):
        return fill(UNDEFINED_HINT, [message])
    cannot = _CANNOT_IMPORT.search(message)
    if cannot:
        name, module = cannot.groups()
        return (
            f"the installed `{module}` has no `{name}`: `{module.split('.')[0]}` in the image is another version "
            "than the code importing it expects; install the matching version"
        )
    module = _NO_MODULE.search(message)
    what = f"`{module.group(1)}` is" if module else "a module or shared library is"
    return f"{what} missing or mismatched in the image; install it"


def import_hint(message: str) -> str:
    """An import that failed while the model was built: the version of the named module, not the provider."""
    m = _CANNOT_IMPORT.search(message)
    if m:
        name, module = m.groups()
        return (
            f"an import failed while building the model: the installed `{module}` has no `{name}`; check the "
            f"version of `{module.split('.')[0]}` this code expects (or the name's spelling), then rerun"
        )
    return f"an import failed while building the model ({message[:120]}); check the installed versions, then rerun"


def weight_import(block: Block | None) -> bool:
    """Whether the root traceback passes through Bridge's (or mbridge's) HF weight import."""
    return block is not None and any(
        func in WEIGHT_IMPORT and ("/megatron/bridge/" in path or "/mbridge/" in path) for func, path in block.frames
    )
