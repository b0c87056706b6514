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

import contextlib
import importlib.machinery
import importlib.util
import json
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


def _trace_bridge_functions():
    """Record every Bridge function this process runs, once each (Python 3.12 `sys.monitoring`).

    With VERL_E2E_TRACE_DIR and VERL_E2E_TRACE_ROOT (the Bridge checkout) set, as the driver sets them
    for verl's processes and its Ray workers, a PY_START callback writes one JSON line per function
    under src/megatron/bridge/ the first time it starts, to <dir>/functions-<pid>.jsonl, written at once
    so a SIGKILLed worker loses nothing. Every code object is disabled after its first event
    (`DISABLE`), Bridge's or not, so the cost is one callback per function ever run. Pythons before
    3.12 record nothing (the run dir then has no records, and says so).
    """
    out, root = os.environ.get("VERL_E2E_TRACE_DIR"), os.environ.get("VERL_E2E_TRACE_ROOT")
    monitoring = getattr(sys, "monitoring", None)
    if not out or not root or monitoring is None:
        return
    tool = next((t for t in (4, 3, 5) if monitoring.get_tool(t) is None), None)
    if tool is None:
        return
    try:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"functions-{os.getpid()}.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return
    base = root.rstrip("/") + "/"
    prefix = base + "src/megatron/bridge/"
    disable = monitoring.DISABLE
    line_event = monitoring.events.LINE
    ran_line = _line_recorder(out, base, disable)

    def started(code, offset):  # noqa: ARG001 - the PY_START signature
        if code.co_filename.startswith(prefix):
            record = {"file": code.co_filename[len(base) :], "qualname": code.co_qualname, "line": code.co_firstlineno}
            with contextlib.suppress(OSError):
                os.write(fd, (json.dumps(record) + "\n").encode("utf-8", "replace"))
            if ran_line is not None:  # this code object's lines, each once (no other code pays for it)
                with contextlib.suppress(ValueError):
                    monitoring.set_local_events(tool, code, line_event)
        return disable

    monitoring.use_tool_id(tool, "verl-e2e")
    monitoring.register_callback(tool, monitoring.events.PY_START, started)
    if ran_line is not None:
        monitoring.register_callback(tool, line_event, ran_line)
    monitoring.set_events(tool, monitoring.events.PY_START)


def _line_recorder(out, base, disable):
    """A LINE callback writing each Bridge line the first time it runs to <dir>/lines-<pid>.txt, compactly
    (`F<TAB>index<TAB>path` once per file, then `index<TAB>line`): a changed line inside a function a cell
    ran may still sit in a branch that never ran there, and only line records can tell."""
    try:
        fd = os.open(os.path.join(out, f"lines-{os.getpid()}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return None
    files = {}

    def ran_line(code, line):
        index = files.get(code.co_filename)
        with contextlib.suppress(OSError):
            if index is None:
                index = files[code.co_filename] = len(files)
                os.write(fd, f"F\t{index}\t{code.co_filename[len(base) :]}\n".encode("utf-8", "replace"))
            os.write(fd, f"{index}\t{line}\n".encode())
        return disable

    return ran_line


_trace_bridge_functions()


def _watch_optimizer_steps():
    """Record what every optimizer step did to the parameters it owns (`updates-<pid>.jsonl`).

    A run can finish every step and still train nothing: an adapter whose output is zeroed gets zero
    gradients, a step size that never reaches the optimizer leaves the weights where they were, and
    verl's own metrics show neither reliably (its grad norm is the actor's only, and a weight-decay
    step moves weights without any gradient). So every process that imports `torch.optim.optimizer`
    registers torch's global step hooks: before a step they keep a copy of the trainable parameters
    (or, above MAX_COPIED elements, a float64 sum per tensor, which any real update changes), after
    it they write one JSON line: the optimizer's class, its parameter count and elements, the
    largest learning rate of its groups, the norms of the gradients, the update and the weights, and
    a fingerprint of the weights after the step (and before the process's first step): how many
    tensors are all zero, and the sum of every element. A resumed run must start where the saved one
    ended.
    Megatron's mixed-precision optimizers step fp32 copies and copy them into the model only after a
    step, and a resume loads those copies from the optimizer's checkpoint whatever the model's own
    checkpoint held. So the first step of a process also fingerprints the model's weights themselves
    (`model_zero_before`, `model_sum_before`): what that step's forward, and the rollout before it, ran.
    The hooks only read; a failure inside them is swallowed so the run is never changed by them.
    """
    out = os.environ.get("VERL_E2E_TRACE_DIR")
    if not out:
        return
    _after_import("torch.optim.optimizer", lambda module: _register_step_hooks(module, out))
    _after_import("megatron.core.optimizer.optimizer", _register_megatron_optimizers)


def _after_import(name, then):
    """Call `then(module)` once module `name` has been executed. The finder resolves the spec with the
    finders after it and only wraps the loader's exec_module, so the import proceeds as without it."""

    class _AfterImport:
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):  # noqa: ARG003 - the finder protocol
            if fullname != name:
                return None
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(cls)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                with contextlib.suppress(Exception):
                    then(module)

            spec.loader.exec_module = exec_module
            return spec

        @classmethod
        def invalidate_caches(cls):
            return None

    sys.meta_path.insert(0, _AfterImport)


# id(a torch optimizer) -> a weak reference to the Megatron optimizer that steps it (and owns the model's weights)
_MEGATRON = {}


def _register_megatron_optimizers(module):
    """Remember, for each Megatron optimizer built, which torch optimizer it steps: every subclass's
    __init__ calls MegatronOptimizer.__init__(optimizer, ...) first, which is wrapped here to note the pair."""
    import weakref  # noqa: PLC0415 - only where Megatron's optimizer module is imported

    base = module.MegatronOptimizer
    init = base.__init__

    def noting_init(self, optimizer, *args, **kwargs):
        init(self, optimizer, *args, **kwargs)
        with contextlib.suppress(Exception):
            _MEGATRON[id(optimizer)] = weakref.ref(self)

    noting_init.__wrapped__ = init
    base.__init__ = noting_init


def _model_params(opt):
    """The model's own trained weights behind a torch optimizer, or None where it steps them directly:
    the distributed optimizer keeps them in model_float16_groups/model_fp32_groups, the plain
    mixed-precision one in float16_groups/fp32_from_fp32_groups."""
    ref = _MEGATRON.get(id(opt))
    wrapper = ref() if ref is not None else None
    if wrapper is None or getattr(wrapper, "optimizer", None) is not opt:
        return None
    for names in (("model_float16_groups", "model_fp32_groups"), ("float16_groups", "fp32_from_fp32_groups")):
        groups = [getattr(wrapper, n, None) for n in names]
        if groups[0] is not None:
            return [p for kind in groups if kind for group in kind for p in group]
    return None


MAX_COPIED = 64 * 1024 * 1024  # elements: a copy of more (a full-parameter large model) costs too much memory


def _register_step_hooks(optim_module, out):
    import torch  # noqa: PLC0415 - torch is being imported: this runs inside its import of torch.optim

    before = {}
    order = {}
    steps = {}
    path = os.path.join(out, f"updates-{os.getpid()}.jsonl")
    with contextlib.suppress(OSError):
        os.makedirs(out, exist_ok=True)

    def trainable(opt):
        # every tensor the optimizer steps: Megatron's distributed optimizer steps fp32 copies of the
        # trained weights' shards, which need not carry requires_grad (their .grad is set before the step)
        return [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]

    def pre(opt, args, kwargs):  # noqa: ARG001 - torch's hook signature
        with contextlib.suppress(Exception), torch.no_grad():
            params = trainable(opt)
            numel = sum(p.numel() for p in params)
            copied = numel <= MAX_COPIED
            saved = [p.detach().clone() if copied else p.detach().double().sum() for p in params]
            # the state the first step of this process starts from (a resumed run's must be the saved one)
            start = _state(params) if id(opt) not in steps else None
            model = _model_params(opt) if id(opt) not in steps else None
            model_start = _state(model) if model is not None else None
            before[id(opt)] = (params, saved, copied, numel, start, model_start)

    def post(opt, args, kwargs):  # noqa: ARG001 - torch's hook signature
        with contextlib.suppress(Exception), torch.no_grad():
            params, saved, copied, numel, start, model_start = before.pop(id(opt))
            index = order.setdefault(id(opt), len(order) + 1)
            steps[id(opt)] = steps.get(id(opt), 0) + 1
            record = {
                "pid": os.getpid(),
                "optimizer": index,
                "class": type(opt).__name__,
                "step": steps[id(opt)],
                "params": len(params),
                "elements": numel,
                "lr": max((float(g.get("lr", 0.0)) for g in opt.param_groups), default=0.0),
                "grad_norm": _norm(p.grad for p in params if p.grad is not None),
                "grads_missing": sum(1 for p in params if p.grad is None),
                "weight_norm": _norm(p.detach() for p in params),
            }
            after = _state(params)
            if after is not None:
                record["zero_after"], record["sum_after"] = after
            if start is not None:
                record["zero_before"], record["sum_before"] = start
            if model_start is not None:
                record["model_zero_before"], record["model_sum_before"] = model_start
            if copied:
                record["update_norm"] = _norm(p.detach() - s for p, s in zip(params, saved, strict=True))
            else:
                record["changed_tensors"] = sum(
                    1 for p, s in zip(params, saved, strict=True) if bool(p.detach().double().sum() != s)
                )
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    optim_module.register_optimizer_step_pre_hook(pre)
    optim_module.register_optimizer_step_post_hook(post)


def _state(params):
    """(tensors that are all zero, float64 sum of every element), or None: a fingerprint of the weights.
    LoRA's second matrix starts at zero and any step moves it, so the count tells a resumed run that
    started from the saved adapters from one that started from fresh ones, whatever the dtype round trip."""
    import torch  # noqa: PLC0415 - only ever called from the step hooks, after torch is imported

    if not params:
        return 0, 0.0
    try:  # one device: two reductions and one synchronisation
        zeros = torch.stack([p.detach().count_nonzero() == 0 for p in params]).sum()
        total = torch.stack([p.detach().double().sum() for p in params]).sum()
        return int(zeros), float(total)
    except RuntimeError:  # tensors on several devices
        with contextlib.suppress(Exception):
            zero = sum(int(p.detach().count_nonzero() == 0) for p in params)
            return zero, sum(float(p.detach().double().sum()) for p in params)
    except Exception:  # a fingerprint that cannot be taken is left out, the step record is not
        pass
    return None


def _norm(tensors):
    total = 0.0
    for t in tensors:
        total += float(t.float().pow(2).sum())
    return total**0.5


_watch_optimizer_steps()


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
