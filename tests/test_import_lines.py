"""Import lines a change adds or removes run nothing new in a cell when they cannot fail or do something on
import: a removed import whose names the change stops using, one from the standard library, one of a Bridge
module the recorded cells already import. A third-party import, a Bridge module no cell imported, a removed
import nothing else removed uses, and a backslash-continued import stay module code (Level 0)."""

from __future__ import annotations

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import importlines
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_ast_scopes, with_diff
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select
from verl_e2e.plan.surface import Surface

CONFIG = "src/megatron/bridge/training/config.py"
PICKLE = "src/megatron/bridge/utils/safe_pickle.py"


def _count(lines: list[str], tags: str) -> int:
    return sum(1 for line in lines if line[0] in tags)


def _diff(head: list[str], body: list[str], path: str = CONFIG) -> str:
    """A two-hunk diff of `path` as git prints it: the import block, then a method of ConfigContainer."""
    return "\n".join(
        [
            f"diff --git a/{path} b/{path}",
            "index 1111111..2222222 100644",
            f"--- a/{path}",
            f"+++ b/{path}",
            f"@@ -30,{2 + _count(head, '- ')} +30,{2 + _count(head, '+ ')} @@",
            " from megatron.core.optimizer import OptimizerConfig",
            *head,
            " from megatron.core.transformer.module import MegatronModule",
            f"@@ -1070,{4 + _count(body, '- ')} +1070,{4 + _count(body, '+ ')} @@ class ConfigContainer(Container):",
            '         if not getattr(self.model, "deterministic_mode", False):',
            "             return",
            " ",
            *body,
            "         # Disallow cross-entropy loss fusion as it is not deterministic",
            "",
        ]
    )


# dev PR #3543's kind: a check and the import only it used leave together
USES_GONE = ["-        if getattr(self.model, 'attention_backend', None) == AttnBackend.flash:", "-            raise X"]
REMOVED = ["-from megatron.core.transformer.enums import AttnBackend"]


def _file(text: str, path: str = CONFIG) -> ChangedFile:
    (file,) = with_diff([ChangedFile(path)], parse_unified_diff(text))
    return file


def _record(*modules: str) -> Ran:
    """A recorded Level 0 cell that imported `modules` (and config.py) and ran no method of ConfigContainer."""
    ran = {m: frozenset({"<module>"}) for m in modules}
    return Ran(0, "lora-ddp", "qwen", "", "", {CONFIG: frozenset({"<module>", "LoggerConfig.finalize"}), **ran})


def test_a_removed_import_whose_names_the_change_stops_using_is_no_module_code(matrix: Matrix) -> None:
    file = _file(_diff(REMOVED, USES_GONE))
    assert not file.module_level and file.unnamed_methods == ("ConfigContainer",)
    sel = select(matrix, [file], ran=[_record()])
    assert sel.levels == () and "none builds ConfigContainer" in sel.off_surface[CONFIG]


def test_a_removed_import_still_bound_elsewhere_or_used_by_nothing_removed_is_module_code() -> None:
    assert _file(_diff(REMOVED, ["-            raise X"])).module_level  # it may register something on import
    rebound = ["-from typing import Callable, Optional", "+from typing import Any, Callable, Optional"]
    assert not _file(_diff(rebound, ["-            raise X"])).module_level  # the added line binds them again


@pytest.mark.parametrize(
    ("line", "module_code"),
    [
        ("+from typing import Any", False),
        ("+import dataclasses, functools", False),
        ("+from __future__ import annotations", True),  # every annotation in the module becomes a string
        ("+from megatron.bridge.utils.safe_pickle import safe_pickle_load", False),  # checked against the records
        ("+from transformers.utils import ModelOutput", True),  # verl's image has its own transformers
        ("+import nvidia_resiliency_ext.attribution as attribution", True),
        ("+from megatron.core.enums import \\", True),  # a backslash continuation is not read
    ],
)
def test_which_added_import_lines_are_module_code(line: str, module_code: bool) -> None:
    assert _file(_diff([line], ["-            raise X"])).module_level is module_code


def test_a_bracketed_import_takes_its_module_from_the_opening_line() -> None:
    bracketed = [" from megatron.bridge.training.utils import (", "+    log_helpers,", "     other,", " )"]
    file = _file(_diff(bracketed, ["-            raise X"]))
    assert not file.module_level
    assert file.bridge_imports == ("megatron.bridge.training.utils", "?megatron.bridge.training.utils.log_helpers")
    third = [" from transformers import (", "+    AutoConfig,", " )"]
    assert _file(_diff(third, ["-            raise X"])).module_level


def test_a_relative_import_resolves_against_the_files_package() -> None:
    lines = importlines.ImportLines("src/megatron/bridge/models/qwen/qwen_provider.py")
    assert lines.see("+", "from ..gpt_provider import GPTModelProvider", 12)
    assert lines.bridge_modules() == (
        "megatron.bridge.models.gpt_provider",
        "?megatron.bridge.models.gpt_provider.GPTModelProvider",
    )


def test_a_bridge_module_no_recorded_cell_imported_is_module_code_again(matrix: Matrix) -> None:
    """The new import's module has imports of its own that no cell has run: they may fail in verl's image."""
    file = _file(_diff(["+from megatron.bridge.utils.safe_pickle import safe_pickle_load"], ["-            raise X"]))
    surface = Surface("", "", (), frozenset({CONFIG, PICKLE}))
    seen = select(matrix, [file], ran=[_record(PICKLE)], surface=surface)
    assert seen.levels == (), seen.reasons
    unseen = select(matrix, [file], ran=[_record()], surface=surface)
    assert unseen.levels == (0,), unseen.reasons
    (settled,) = importlines.settle([file], [_record()], surface)
    assert settled.module_level
    # recorded at the records' Bridge, but this change adds the module (a class moved into a new file)
    settled, _ = importlines.settle([file, ChangedFile(PICKLE, "A")], [_record(PICKLE)], surface)
    assert settled.module_level


def test_a_name_taken_from_a_recorded_module_counts_as_a_module_only_where_the_tree_has_one() -> None:
    file = ChangedFile(CONFIG, module_level=False, bridge_imports=("megatron.bridge.utils", "?megatron.bridge.utils.x"))
    init = "src/megatron/bridge/utils/__init__.py"
    (name,) = importlines.settle([file], [_record(init)], Surface("", "", (), frozenset({init})))
    assert not name.module_level  # `x` is a name in utils/__init__.py
    tree = Surface("", "", (), frozenset({init}), unreachable=frozenset({"src/megatron/bridge/utils/x.py"}))
    (module,) = importlines.settle([file], [_record(init)], tree)
    assert module.module_level  # utils/x.py exists and no cell imported it


def test_with_both_trees_a_quiet_import_line_is_no_module_code_and_a_loud_one_is() -> None:
    old = b"import os\nfrom megatron.core.transformer.enums import AttnBackend\n\n\nclass C:\n    def f(self):\n"
    old += b"        if AttnBackend.flash:\n            return 1\n        return 2\n"
    new = b"import os\n\n\nclass C:\n    def f(self):\n        return 2\n"
    diff = "\n".join(
        [
            f"diff --git a/{CONFIG} b/{CONFIG}",
            f"--- a/{CONFIG}",
            f"+++ b/{CONFIG}",
            "@@ -1,3 +1,2 @@",
            " import os",
            "-from megatron.core.transformer.enums import AttnBackend",
            " ",
            "@@ -6,4 +5,2 @@ class C:",
            "     def f(self):",
            "-        if AttnBackend.flash:",
            "-            return 1",
            "         return 2",
            "",
        ]
    )
    diffs = parse_unified_diff(diff)
    (file,) = with_ast_scopes(with_diff([ChangedFile(CONFIG)], diffs), diffs, {CONFIG: old}, {CONFIG: new})
    assert not file.module_level and file.functions == ("C.f",)
    loud = diff.replace("-from megatron.core.transformer.enums import AttnBackend", "-import apex")
    diffs = parse_unified_diff(loud)
    (file,) = with_ast_scopes(with_diff([ChangedFile(CONFIG)], diffs), diffs, {CONFIG: old}, {CONFIG: new})
    assert file.module_level
