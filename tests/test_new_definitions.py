"""A change that only adds new top-level functions or classes to a module verl imports (additions.py):
nothing unchanged can call them, so importing the module (Level 0) is all they can break until a
changed line calls them. Their words (a `tp_rank` branch in a mapping no bridge uses yet) select
nothing more; a decorator, module code, a method of an existing class or a rename does. And a
function's own variable renamed throughout computes the same thing (changes.is_cosmetic_python_change)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import additions, runtime, surface
from verl_e2e.plan.changes import ChangedFile, is_cosmetic_python_change
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_diff
from verl_e2e.plan.gitchanges import changes_from_git
from verl_e2e.plan.select import select

MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
NEW_MAPPING = "\n".join(
    [
        "@@ -1403,6 +1403,18 @@ class QKVMapping(MegatronParamMapping[Dict[str, torch.Tensor]]):",
        "         )",
        " ",
        " ",
        "+class KVMapping(MegatronParamMapping[Dict[str, torch.Tensor]]):",
        '+    """Interleaved key/value weights."""',
        "+",
        "+    def hf_to_megatron(self, hf_weights, megatron_module):",
        "+        if self.tp_rank == 0:",
        '+            merged = merge_kv_weights(self._get_config(megatron_module), hf_weights["k"], hf_weights["v"])',
        "+        else:",
        "+            merged = None",
        "+        return self._tp_mapping.hf_to_megatron(merged, megatron_module)",
        "+",
        "+",
        " class MambaInProjMapping(MegatronParamMapping[Dict[str, torch.Tensor]]):",
        '     """Mapping for Mamba input projection weights."""',
        " ",
        "",
    ]
)


def _file(path: str, hunks: str) -> ChangedFile:
    diff = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunks}"
    (parsed,) = parse_unified_diff(diff).values()
    (file,) = with_diff([ChangedFile(path)], {path: parsed})
    return file


def test_a_new_class_between_two_others_is_a_new_definition() -> None:
    assert _file(MAPPING, NEW_MAPPING).new_definitions == ("KVMapping",)


@pytest.mark.parametrize(
    "hunk",
    [
        # decorated: a registration runs at import
        "@@ -10,3 +10,7 @@\n x = 1\n \n+@register_bridge(source='Foo')\n+class FooBridge:\n+    pass\n+\n \n",
        # module code beside the definition
        "@@ -10,3 +10,6 @@\n x = 1\n \n+def f():\n+    return 1\n+REGISTRY['f'] = f\n \n",
        # a method of an existing class (may override the base's)
        "@@ -10,3 +10,5 @@ class A(Base):\n     x = 1\n \n+    def finalize(self):\n+        return None\n",
        # a new def line over unchanged indented lines: an existing body under a new name
        "@@ -10,4 +10,5 @@\n \n-def load(x):\n+def load_weights(x):\n     return x\n",
        "@@ -10,3 +10,5 @@\n \n+def helper():\n+    pass\n     y = compute()\n",
    ],
)
def test_anything_else_is_not(hunk: str) -> None:
    assert _file(MAPPING, hunk).new_definitions is None


def test_a_name_the_base_file_already_mentions_is_not_new() -> None:
    assert additions.still_new(("KVMapping",), b"from x import y\n") == ("KVMapping",)
    assert additions.still_new(("KVMapping",), b"KVMapping = None  # filled in below\n") is None


def test_new_definitions_nothing_calls_run_level_0_only(matrix: Matrix) -> None:
    plan = select(matrix, [_file(MAPPING, NEW_MAPPING)], surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == (0,)
    assert any(r.rule == "new-definitions" for r in plan.reasons[0])


def test_a_changed_line_that_calls_them_brings_their_words_back(matrix: Matrix) -> None:
    caller = _file(
        "src/megatron/bridge/models/qwen/qwen2_bridge.py",
        "@@ -40,3 +40,3 @@ class Qwen2Bridge(MegatronModelBridge):\n"
        "     def mapping_registry(self):\n"
        '-        return [QKVMapping("qkv", q="q", k="k", v="v")]\n'
        '+        return [KVMapping("kv", k="k", v="v")]\n',
    )
    plan = select(matrix, [_file(MAPPING, NEW_MAPPING), caller], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 in plan.levels  # the TP-rank branch of the mapping a bridge now uses


@pytest.mark.parametrize(
    ("old", "new", "cosmetic"),
    [
        # a function's own variable renamed throughout: the same computation
        (
            "def t(m):\n    types = (A, B)\n    if isinstance(m, types):\n        return m\n",
            "def t(m):\n    adapter_types = (A, B)\n    if isinstance(m, adapter_types):\n        return m\n",
            True,
        ),
        # a closure keeps reading the renamed variable
        (
            "def f():\n    n = 2\n    def g(x):\n        return x * n\n    return g\n",
            "def f():\n    k = 2\n    def g(x):\n        return x * k\n    return g\n",
            True,
        ),
        # a parameter renamed: callers may pass it by keyword
        ("def f(a):\n    return a\n", "def f(b):\n    return b\n", False),
        # a local now named like the global it read: another value
        ("def f():\n    a = 1\n    return b\n", "def f():\n    b = 1\n    return b\n", False),
        # two variables merged
        ("def f():\n    a = 1\n    b = 2\n    return a\n", "def f():\n    a = 1\n    a = 2\n    return a\n", False),
        # a global read renamed: another object
        ("def f():\n    x = g()\n    return x\n", "def f():\n    x = h()\n    return x\n", False),
        # a function that reads its names as text
        ("def f():\n    a = 1\n    return locals()\n", "def f():\n    b = 1\n    return locals()\n", False),
    ],
)
def test_a_variable_renamed_inside_its_function_is_cosmetic(old: str, new: str, cosmetic: bool) -> None:
    assert is_cosmetic_python_change(old.encode(), new.encode()) is cosmetic


NEW_MODULE = "src/megatron/bridge/peft/vera_layers.py"
NEW_MODULE_TEXT = "class VeRAAdapter(nn.Module):\n    def forward(self, x):\n        return self.linear_out(x) * (self.alpha / self.dim)\n"


def _added(path: str, text: str) -> ChangedFile:
    lines = text.splitlines()
    hunk = f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    diff = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n{hunk}"
    (parsed,) = parse_unified_diff(diff).values()
    (file,) = with_diff([ChangedFile(path, status="A")], {path: parsed})
    return file


def test_a_new_module_nothing_names_runs_in_no_cell(matrix: Matrix) -> None:
    """An adapter file added under peft/ with no import of it: nothing loads it, whatever its words."""
    plan = select(matrix, [_added(NEW_MODULE, NEW_MODULE_TEXT)], surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == ()
    assert any("vera_layers" in n and "nothing imports" in n for n in plan.unexecuted)


def test_a_new_module_the_change_imports_is_planned(matrix: Matrix) -> None:
    importer = _file(
        "src/megatron/bridge/peft/lora.py",
        "@@ -20,2 +20,3 @@\n import torch\n+from megatron.bridge.peft.vera_layers import VeRAAdapter\n \n",
    )
    files = [_added(NEW_MODULE, NEW_MODULE_TEXT), importer]
    plan = select(matrix, files, surface=surface.shipped(), ran=runtime.shipped())
    assert 5 in plan.levels  # the adapter's forward is what an imported layer may now compute


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_an_existing_module_nothing_names_runs_in_no_cell_where_the_tree_shows_it(
    tmp_path: Path, matrix: Matrix
) -> None:
    """With the trees (--repo): a family's helper module no other Bridge source names (Llama 4's chunking
    utilities) loads in no cell, so a change to it selects nothing and the plan says so; the family's
    bridge, which its package imports, is not such a module."""
    repo = tmp_path / "bridge"
    llama = repo / "src/megatron/bridge/models/llama"
    llama.mkdir(parents=True)
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    (llama / "__init__.py").write_text("from megatron.bridge.models.llama.llama_bridge import LlamaBridge\n")
    (llama / "llama_bridge.py").write_text("class LlamaBridge:\n    def provider_bridge(self, hf):\n        return 1\n")
    # its caller lives beside it, in a forward any module may have (nothing static says it is never called)
    helper = "class Llama4Attention:\n    def forward(self, x, n):\n        return chunkify(x, n)\n\n\n"
    (llama / "llama4_utils.py").write_text(helper + "def chunkify(x, n):\n    return ((len(x) + n - 1) // n) * n\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-qb", "feature")
    (llama / "llama4_utils.py").write_text(helper + "def chunkify(x, n):\n    return ((len(x) + n) // n) * n\n")
    (llama / "llama_bridge.py").write_text("class LlamaBridge:\n    def provider_bridge(self, hf):\n        return 2\n")
    _git(repo, "commit", "-qam", "feature")
    files, _, _ = changes_from_git(str(repo), "main", "feature")
    by = {f.path: f for f in files}
    assert by["src/megatron/bridge/models/llama/llama4_utils.py"].unnamed_module
    assert not by["src/megatron/bridge/models/llama/llama_bridge.py"].unnamed_module  # its package imports it
    alone = select(matrix, [by["src/megatron/bridge/models/llama/llama4_utils.py"]], ran=runtime.shipped())
    assert alone.levels == ()
    assert any("llama4_utils" in n and "nothing imports" in n for n in alone.unexecuted), alone.unexecuted


# a multimodal provider package added under a directory name a later Bridge gave to Xiaomi's MiMo family
MIMO = "src/megatron/bridge/models/mimo"
MIMO_INIT = "from megatron.bridge.models.mimo.mimo_provider import MimoModelProvider\n"
MIMO_PROVIDER = (
    "@dataclass\nclass MimoModelProvider(ModelProviderMixin):\n    use_megatron_fsdp: bool = False\n"
    "    def provide(self, pre_process=None):\n        cfg = TransformerConfig(num_query_groups=3)\n"
    "        return MimoModel(cfg, ModuleSpec(module=GPTModel))\n"
)
TYPED_ONLY = (
    "@@ -37,2 +37,3 @@\n from megatron.bridge.models import GPTModelProvider\n"
    "+from megatron.bridge.models.mimo.mimo_provider import MimoModelProvider\n from megatron.bridge.peft.base import PEFT\n"
    "@@ -1348,2 +1349,2 @@ class ConfigContainer(Container):\n"
    "-    model: GPTModelProvider | T5ModelProvider\n+    model: GPTModelProvider | T5ModelProvider | MimoModelProvider\n"
    "     optimizer: OptimizerConfig\n"
)


def _mimo_change(provider: str = MIMO_PROVIDER, config: str = TYPED_ONLY) -> list[ChangedFile]:
    return [
        _added(f"{MIMO}/__init__.py", MIMO_INIT),
        _added(f"{MIMO}/mimo_provider.py", provider),
        _file("src/megatron/bridge/training/config.py", config),
    ]


def test_a_model_directory_the_change_creates_without_a_bridge_runs_only_its_import(matrix: Matrix) -> None:
    """No register_bridge in the new package: AutoBridge builds it for no checkpoint, whatever its words
    (FSDP, query groups, layer specs) say, and the matrix's mimo family (Xiaomi's) would build other code."""
    plan = select(matrix, _mimo_change(), surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == (0,) and set(plan.targets[0]) == {"qwen"}  # the import config.py adds
    assert all(
        "registers no bridge" in plan.off_surface[f"{MIMO}/{name}"] for name in ("__init__.py", "mimo_provider.py")
    )


def test_a_new_directory_that_registers_a_bridge_or_is_called_is_planned(matrix: Matrix) -> None:
    registered = MIMO_PROVIDER.replace("@dataclass\n", "@MegatronModelBridge.register_bridge(source=MiMoForCausalLM)\n")
    plan = select(matrix, _mimo_change(registered), surface=surface.shipped(), ran=runtime.shipped())
    assert {0, 4} <= set(plan.levels) and "mimo" in plan.targets[0]
    called = TYPED_ONLY.replace(
        "     optimizer: OptimizerConfig\n", "+    extra = MimoModelProvider()\n     optimizer: OptimizerConfig\n"
    )
    called = called.replace("@@ -1348,2 +1349,2 @@", "@@ -1348,2 +1349,3 @@")
    plan = select(matrix, _mimo_change(config=called), surface=surface.shipped(), ran=runtime.shipped())
    assert not any("registers no bridge" in why for why in plan.off_surface.values())


def test_an_added_file_is_never_one_a_record_ran(matrix: Matrix) -> None:
    """The shipped records (Bridge 067f987) ran a models/mimo/__init__.py; a change adding one at its own
    base added other code, so that record does not select Xiaomi's MiMo cell for it."""
    from verl_e2e.plan import unrun

    assert unrun.recorded_hits(runtime.shipped(), _added(f"{MIMO}/__init__.py", MIMO_INIT)) == ([], None)
