"""The driver's import checks: where megatron.bridge resolves (before anything runs), and the import of
every Bridge module verl imports (next to the first phase, not before it).

Why the second runs alongside the phase: importing megatron.bridge and the modules verl names took
19.7 s of a 208 s tiny-Qwen2 cell on the H200 (2026-12-04), all of it on the cell's critical path,
while the phase's own processes import the same modules again a few seconds later. Run in parallel it
costs no wall time, and it still gives the same verdict: a module that fails to import stops the phase
(the watchdog in phaselog.py polls `ModuleImports.due`) and becomes the cell's setup failure, naming the
Bridge line, exactly as when it ran first. Standard library only (runs in the image).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import preflight
from records import Recorder, log


def verify_location(rec: Recorder, bridge: Path, pythonpath: str, mode: str, token_env: dict[str, str]) -> int | None:
    """Where megatron.bridge resolves (and, with `full`, imports) in the driver and a Ray task; a path
    outside the checkout or a failed import stops the cell (returns the exit code)."""
    started = time.time()
    records, error = preflight.check_imports(pythonpath, mode, timeout=300, extra_env=token_env)
    rec.provenance["bridge_import"] = {k: v["origin"] for k, v in records.items()}
    rec.provenance["import_check"] = dict(records, mode=mode)
    if error:
        rec.step("imports", "failed", error, started)
        return rec.fail("imports", "setup", error)
    src = str(bridge / "src") + "/"
    wrong = {k: v["origin"] for k, v in records.items() if not str(v["origin"] or "").startswith(src)}
    if wrong:
        where, path = next(iter(wrong.items()))
        rec.step("imports", "failed", f"{where} resolves megatron.bridge to {path}", started)
        return rec.fail("imports", "setup", f"wrong Bridge: the {where} imports {path}, not {src}")
    for where, result in records.items():
        if result.get("error"):
            err = result["error"]
            reason = f"`import megatron.bridge` failed in the {where}: {err['type']}: {err['message']}"
            rec.step("imports", "failed", reason, started)
            return rec.fail("imports", "model_build" if err["in_bridge"] else "setup", reason)
    who = "driver and Ray worker import" if "ray_worker" in records else "driver resolves"
    later = "" if "ray_worker" in records else "; verl's Ray workers report theirs through the probe"
    rec.step("imports", "ok", f"{who} {records['driver']['origin']}{later}", started)
    return None


class ModuleImports:
    """megatron.bridge and every Bridge module verl imports, imported by a fresh interpreter in a thread
    of the driver while the cell goes on; `due` says when the running phase must stop, `finish` records
    the result (and the setup failure, when a module of Bridge's own failed)."""

    def __init__(self, rec: Recorder, bridge: Path, verl: Path, pythonpath: str, timeout: float = 600) -> None:
        self.rec, self.src, self.bridge = rec, str(bridge / "src") + "/", bridge
        self.results: dict | None = None
        self.started = time.time()
        modules = preflight.verl_bridge_modules(str(verl))
        self._thread = threading.Thread(
            target=self._run, args=(pythonpath, modules, timeout), name="verl-e2e-imports", daemon=True
        )
        self._thread.start()
        log(f"imports: importing {len(modules)} Bridge module(s) verl imports, next to the first phase")

    def _run(self, pythonpath: str, modules: list[str], timeout: float) -> None:
        try:
            self.results = preflight.import_modules(pythonpath, modules, self.src, timeout=timeout)
        except Exception as exc:  # the check must never take the driver down; the run shows the rest
            self.results = {"error": f"the import check crashed: {type(exc).__name__}: {exc}"}

    def failure(self) -> tuple[str, dict] | None:
        """(module, error) of the first Bridge module that failed, once the check is done."""
        results = self.results
        if results is None or isinstance(results.get("error"), str):
            return None
        return preflight.blocking_import(results)

    def due(self) -> str | None:
        """Why the running phase must stop now (a Bridge module verl imports failed), or None."""
        failed = self.failure()
        return None if failed is None else f"{self._reason(*failed)}; stopping the phase"

    def finish(self) -> int | None:
        """Wait for the check, record it; the exit code when a Bridge module failed to import."""
        self._thread.join()
        results = self.results or {"error": "the import check ended without a result"}
        check = self.rec.provenance.setdefault("import_check", {})
        if isinstance(results.get("error"), str):
            check["modules"] = {"error": results["error"]}
            log(f"imports: {results['error']}")
            return None  # the run itself shows it; no verdict from a check that did not finish
        check["modules"] = {
            m: (None if e is None else {k: v for k, v in e.items() if k != "traceback"}) for m, e in results.items()
        }
        notes = [f"{m}: {e['type']}: {e['message']}" for m, e in results.items() if isinstance(e, dict)]
        failed = preflight.blocking_import(results)
        if failed is None:
            log(
                f"imports: {len(results) - len(notes)} of {len(results)} Bridge module(s) verl imports imported"
                + (f"; not Bridge's to fix: {'; '.join(notes)}" if notes else "")
            )
            self.rec.save()
            return None
        module, err = failed
        sys.stdout.write(err.get("traceback", ""))  # the driver log keeps the whole traceback
        sys.stdout.flush()
        reason = self._reason(module, err)
        self.rec.step("imports", "failed", reason, self.started)
        return self.rec.fail("imports", "model_build", reason)

    def _reason(self, module: str, err: dict) -> str:
        frames = err.get("frames") or [{"file": "?", "line": 0, "function": "?"}]
        frame = next((f for f in reversed(frames) if f["file"].startswith(self.src)), frames[-1])
        inside = frame["file"].startswith(self.src)
        where = f"{frame['file'][len(str(self.bridge)) + 1 :] if inside else frame['file']}:{frame['line']}"
        return (
            f"`import {module}` (verl imports it) failed: {err['type']}: {err['message']} "
            f"at {where} in {frame['function']}"
        )


def start_module_imports(rec: Recorder, bridge: Path, pythonpath: str, mode: str) -> ModuleImports | None:
    """The module import check, started (none with `location`, which only resolves)."""
    if mode == "location":
        return None
    verl = Path(rec.provenance.get("repos", {}).get("verl", {}).get("path") or os.environ.get("VERL_REPO", "."))
    return ModuleImports(rec, bridge, verl, pythonpath)
