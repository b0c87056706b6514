"""Report where every Python process imports megatron.bridge from (verl-e2e's import probe).

Put first on PYTHONPATH by the cell driver, so verl's driver and its Ray workers (which get the same
PYTHONPATH through `ray_kwargs.ray_init.runtime_env.env_vars`) each print one line when they look up
`megatron.bridge`, naming the file they would load:

    verl-e2e: bridge import (pid 1234): /workspace/Megatron-Bridge/src/megatron/bridge/__init__.py
    verl-e2e: bridge import (ray-worker pid 5678): /workspace/Megatron-Bridge/src/megatron/bridge/__init__.py

A process that runs as a Ray worker says so: that line is the Ray-worker import check (the skill's
"workers may not inherit PYTHONPATH"), taken from verl's own workers instead of a Ray task started
only to look.

The finder only observes: it resolves the spec with the finders after it and returns None, so the
import itself proceeds exactly as it would without the probe. An image's own sitecustomize still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys

_REPORTED = False


class _BridgeProbe:
    @classmethod
    def find_spec(cls, name, path=None, target=None):  # noqa: ARG003 - the finder protocol
        global _REPORTED
        if name != "megatron.bridge" or _REPORTED:
            return
        _REPORTED = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            origin = spec.origin if spec is not None else "not found"
        except Exception as exc:
            origin = f"unresolved ({type(exc).__name__})"
        where = f"ray-worker pid {os.getpid()}" if _in_ray_worker() else f"pid {os.getpid()}"
        sys.stderr.write(f"verl-e2e: bridge import ({where}): {origin}\n")
        sys.stderr.flush()
        return

    @classmethod
    def invalidate_caches(cls):
        return None


def _in_ray_worker():
    """True inside a Ray worker process (Ray's WORKER_MODE), without importing Ray."""
    worker = sys.modules.get("ray._private.worker")
    if worker is not None:
        mode = getattr(getattr(worker, "global_worker", None), "mode", None)
        if mode is not None:
            return mode == getattr(worker, "WORKER_MODE", 1)
    return os.path.basename(sys.argv[0] if sys.argv else "") == "default_worker.py"


sys.meta_path.insert(0, _BridgeProbe)


def _chain_image_sitecustomize():
    """Run the sitecustomize this one shadows, if the image has one further down sys.path."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"verl-e2e: the image's sitecustomize failed: {exc!r}\n")


_chain_image_sitecustomize()
