"""What a change touches: unified diffs from real git, AST scopes, registrations, the call graph.

Diffs are produced by git itself (the same program GitHub's API and `plan --repo` use), so the parser
is checked against real output, not against text written to fit it.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from verl_e2e.plan.callgraph import reachable_symbols, unreached_symbols
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.registry import architectures_by_file, registrations
from verl_e2e.plan.scopes import enclosing, innermost, outside_defs

P = "src/megatron/bridge"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    _write(repo, files)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


def _write(repo: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


PROVIDER = """\
    class Provider:
        hidden_size: int = 8

        def finalize(self):
            a = 1
            b = 2
            c = 3
            d = 4
            self.tp = a
            return self


    def helper():
        return 1
    """


def test_git_diff_scopes_statuses_and_line_numbers(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {f"{P}/p.py": PROVIDER, f"{P}/old.py": "x = 1\n", f"{P}/gone.py": "y = 1\n"})
    _write(repo, {f"{P}/p.py": PROVIDER.replace("self.tp = a", "self.tp = b"), f"{P}/gone.py": None})
    _write(repo, {f"{P}/new.py": "def fresh():\n    return 2\n"})
    _git(repo, "mv", f"{P}/old.py", f"{P}/renamed.py")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "change")
    text = _git(repo, "show", "-M", "HEAD")  # `git show` adds a commit header before the diff
    files = parse_unified_diff(text)
    p = files[f"{P}/p.py"]
    assert p.added == ["        self.tp = b"] and p.removed == ["        self.tp = a"]
    assert p.added_at == [9] and p.removed_at == [9]
    # git's default hunk header names the last unindented line above: the class, not the method
    # (plan --repo adds the method from the AST; see the next tests)
    assert list(p.scopes) == ["Provider"] and not p.module_level
    assert files[f"{P}/new.py"].status == "A" and "fresh" in files[f"{P}/new.py"].scopes
    assert files[f"{P}/gone.py"].status == "D"
    renamed = files[f"{P}/renamed.py"]
    assert renamed.status == "R" and renamed.old_path == f"{P}/old.py"


def test_a_removed_line_that_looks_like_a_header_stays_in_its_hunk(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.py": "x = 1\n-- y\n++ z\nw = 2\n"})
    _write(repo, {"a.py": "x = 1\nw = 2\n"})
    files = parse_unified_diff(_git(repo, "diff"))
    assert list(files) == ["a.py"] and files["a.py"].removed == ["-- y", "++ z"]


def test_module_level_change_is_marked(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"m.py": "import os\n\nLIMIT = 1\n"})
    _write(repo, {"m.py": "import os\n\nLIMIT = 2\n"})
    assert parse_unified_diff(_git(repo, "diff"))["m.py"].module_level


def test_ast_scopes_find_the_method_a_hunk_header_does_not_name() -> None:
    source = textwrap.dedent(PROVIDER).encode()
    assert enclosing(source, [9]) == ["Provider", "Provider.finalize"]
    assert enclosing(source, [14]) == ["helper"]
    assert not outside_defs(source, [9, 14]) and outside_defs(source, [11])
    assert enclosing(b"def broken(:\n", [1]) == []  # a file that does not parse yields nothing


def test_innermost_names_the_code_object_a_line_belongs_to() -> None:
    source = textwrap.dedent(PROVIDER).encode()
    assert innermost(source, [9]) == ["Provider.finalize"]  # not the class body around it
    assert innermost(source, [9, 14]) == ["Provider.finalize", "helper"]
    assert innermost(source, [11]) == []  # module level: no def of its own
    assert innermost(b"def broken(:\n", [1]) == []


def test_registrations_in_every_form_bridge_uses() -> None:
    source = textwrap.dedent(
        """
        from transformers import Qwen3ForCausalLM
        _NAME = "Ernie4_5_MoeForCausalLM"

        @MegatronModelBridge.register_bridge(source=Qwen3ForCausalLM, target=GPTModel)
        class A(MegatronModelBridge): ...

        @MegatronModelBridge.register_bridge(source="GlmMoeDsaForCausalLM", target=GPTModel)
        class B(MegatronModelBridge): ...

        @MegatronModelBridge.register_bridge(source=_NAME, target=GPTModel)
        class C(MegatronModelBridge): ...

        if HAVE:
            D = MegatronModelBridge.register_bridge(source=transformers.Mistral3ForConditionalGeneration)(D)
        """
    )
    assert registrations(source) == [
        "Qwen3ForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Mistral3ForConditionalGeneration",
    ]
    assert registrations("@MegatronModelBridge.register_bridge(source=Foo, target=\n") == ["Foo"]  # half a file


def test_a_provider_serves_the_architectures_of_the_bridges_that_import_it() -> None:
    m = f"{P}/models"
    sources = {
        f"{m}/fam/fam_bridge.py": "from megatron.bridge.models.fam.fam_provider import FamProvider\n"
        "from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge\n"
        "@MegatronModelBridge.register_bridge(source='FamForCausalLM')\nclass FamBridge: ...\n",
        f"{m}/fam/fam_provider.py": "from .fam_layers import Layer\n",
        f"{m}/fam/fam_layers.py": "class Layer: ...\n",
        f"{m}/fam/__init__.py": "from .fam_bridge import FamBridge\n",
        f"{m}/conversion/model_bridge.py": "from megatron.bridge.models.fam import fam_bridge\n",
        f"{m}/other/other_bridge.py": "@MegatronModelBridge.register_bridge(source='OtherForCausalLM')\nclass O: ...\n",
    }
    out = architectures_by_file({k: v.encode() for k, v in sources.items()})
    assert out[f"{m}/fam/fam_provider.py"] == ["FamForCausalLM"]
    assert out[f"{m}/fam/fam_layers.py"] == ["FamForCausalLM"]  # through the provider's relative import
    assert f"{m}/conversion/model_bridge.py" not in out  # shared code passes nothing on
    assert out[f"{m}/other/other_bridge.py"] == ["OtherForCausalLM"]


def test_the_call_graph_follows_names_not_files() -> None:
    sources = {
        f"{P}/__init__.py": "from megatron.bridge.tools.api import Api\n",
        f"{P}/tools/__init__.py": "",
        f"{P}/tools/api.py": textwrap.dedent(
            """
            from megatron.bridge.tools import helpers as h
            from megatron.bridge.tools.helpers import Config

            def entry(cfg: Config):
                return h.work() + _private()

            def _private():
                return 1

            def bridge_only_logging():
                return h.noise()

            class Api:
                def save(self):
                    return self._write()

                def _write(self):
                    return 1

                def export_for_bridge_only(self):
                    return h.noise()
            """
        ),
        f"{P}/tools/helpers.py": "class Config: ...\n\ndef work():\n    return 1\n\ndef noise():\n    return 2\n",
    }
    data = {k: v.encode() for k, v in sources.items()}
    reached = reachable_symbols(data, ["megatron.bridge.tools.api:entry", "megatron.bridge:Api"], ["save"])
    api = set(reached[f"{P}/tools/api.py"])
    assert {"entry", "_private", "Api", "Api.save", "Api._write"} <= api
    assert "bridge_only_logging" not in api and "Api.export_for_bridge_only" not in api
    assert set(reached[f"{P}/tools/helpers.py"]) == {"work"}  # an annotation calls nothing
    unreached = unreached_symbols(data, reached)
    assert {"noise", "Config"} <= set(unreached[f"{P}/tools/helpers.py"])
    assert "bridge_only_logging" in unreached[f"{P}/tools/api.py"]


def test_a_class_or_module_named_in_strings_is_reached() -> None:
    """Bridge's `create_peft` loads its PEFT class by name: `("megatron.bridge.peft.canonical_lora",
    "CanonicalLoRA")` and `import_module`. The class so named (with its wrapper's forward) is verl's code,
    and so is a module named alone; a string that names no Bridge module reaches nothing."""
    sources = {
        f"{P}/peft/utils.py": "from importlib import import_module\n\ndef create_peft(kind):\n"
        '    table = {"canonical": ("megatron.bridge.peft.canonical", "Canonical")}\n'
        '    import_module("megatron.bridge.peft.hooks")\n'
        "    mod, name = table[kind]\n    return getattr(import_module(mod), name)\n",
        f"{P}/peft/canonical.py": "class Wrapper:\n    def forward(self, x):\n        return x\n\n"
        "class Canonical:\n    def __init__(self):\n        self.w = Wrapper()\n\n"
        "def unused():\n    return ('megatron.bridge.peft.nowhere', 'X')\n",
        f"{P}/peft/hooks.py": "print('registered')\n",
    }
    data = {k: v.encode() for k, v in sources.items()}
    reached = reachable_symbols(data, ["megatron.bridge.peft.utils:create_peft"], ["forward"])
    assert {"Canonical", "Canonical.__init__", "Wrapper", "Wrapper.forward"} <= set(reached[f"{P}/peft/canonical.py"])
    assert f"{P}/peft/hooks.py" in reached  # the module named alone: its top-level code runs
    assert "unused" in unreached_symbols(data, reached)[f"{P}/peft/canonical.py"]


@pytest.mark.parametrize("missing_status", ["M", "A"])
def test_unknown_code_counts_as_reached(missing_status: str) -> None:
    """A scope the index has never seen (code newer than it) is not called off-surface."""
    from verl_e2e.plan.surface import Surface

    s = Surface("v" * 40, "b" * 40, (), frozenset({"x.py"}), {}, {"x.py": frozenset({"old_helper"})})
    assert s.unreached("x.py", ("old_helper",)) == ["old_helper"]
    assert s.unreached("x.py", ("old_helper", "brand_new")) == []
    assert s.on_surface("never_seen.py") and missing_status in "MA"
