"""Three readings from the fourteenth blind probe set: two lines that trade one token each are a swap
(QKV export naming K's tensor `v` and V's `k`); an activation module built in adapter code changes the
function an adapter computes; and a method every class of a file defines (`hf_to_megatron` of each
mapping) is an interface, so who uses the changed class decides which family runs it."""

from __future__ import annotations

import re

import pytest

from verl_e2e.config.aspects import find, permuted
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.users import own_method

ANY = re.compile(r"\w")


@pytest.mark.parametrize(
    ("removed", "added", "swapped"),
    [
        (
            ["    q_key: q,", "    k_key: k,", "    v_key: v,"],
            ["    q_key: q,", "    k_key: v,", "    v_key: k,"],
            True,
        ),
        (["    a = x[0]", "    b = x[1]"], ["    a = x[1]", "    b = x[0]"], True),
        (["    a_key: a,", "    b_key: b,"], ["    a_key: b,", "    b_key: b,"], False),  # one changed: no swap
        # ... unless it is a same-shaped sibling's name: K's slot given V's tensor (aspects._siblings)
        (["    k_key: k,", "    v_key: v,"], ["    k_key: v,", "    v_key: v,"], True),
        (["    a = f(x, 0)", "    b = f(x, 1)"], ["    a = f(x, 1)", "    b = f(x, 0)"], False),  # call arguments
        (["    a = x if c else y", "    b = y"], ["    a = y if c else x", "    b = x"], False),  # a choice
    ],
)
def test_two_lines_trading_one_token_each_are_a_swap(removed: list[str], added: list[str], swapped: bool) -> None:
    assert (permuted(ANY, removed, added) is not None) is swapped


@pytest.mark.parametrize(
    ("line", "fires"),
    [
        ('            "identity": nn.SiLU(),', True),
        ("        self.activation = nn.GELU()", True),
        ("        self.dropout_prob = 0.1", False),
    ],
)
def test_an_activation_built_in_adapter_code_changes_the_adapters_function(
    matrix: Matrix, line: str, fires: bool
) -> None:
    hits = find(matrix.aspects, "src/megatron/bridge/peft/utils.py", [line], (), [line])
    assert ("adapter-function" in {h.aspect.name for h in hits}) is fires


def test_a_method_every_class_defines_is_an_interface() -> None:
    text = "class A:\n    def hf_to_megatron(self):\n        pass\n\nclass B:\n    def hf_to_megatron(self):\n        pass\n"
    assert not own_method("hf_to_megatron", text)
    assert own_method("hf_config_to_model_config_kwargs", text + "    def hf_config_to_model_config_kwargs(self):\n")


GATE = '        return "gate_proj" in hf_name or ".w1." in hf_name'
UP = '        return "up_proj" in hf_name or ".w3." in hf_name'


@pytest.mark.parametrize(
    ("removed", "added", "swapped"),
    [
        ([GATE, UP], [UP, GATE], True),  # two sibling tests' bodies exchanged, their def lines kept
        ([GATE, UP], [GATE, UP], False),
        ([GATE], [UP], False),  # one test rewritten: a changed token, no trade
    ],
)
def test_two_returns_that_trade_places_answer_for_each_other(
    removed: list[str], added: list[str], swapped: bool
) -> None:
    assert (permuted(ANY, removed, added) is not None) is swapped


@pytest.mark.parametrize(
    ("added", "swapped"),
    [
        (["        up, gate = torch.chunk(w, 2, dim=0)", "        return gate, up"], True),
        (["        gate, up = torch.chunk(w, 2, dim=0)", "        return gate, up"], False),  # named, same order
        (["        up, gate = torch.split(w, 2)", "        return gate, up"], False),  # a new expression: not a rewrite
    ],
)
def test_a_returned_pair_unpacked_and_given_back_reversed_is_a_swap(added: list[str], swapped: bool) -> None:
    assert (permuted(ANY, ["        return torch.chunk(w, 2, dim=0)"], added) is not None) is swapped
