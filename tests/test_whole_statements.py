"""Line records name one line per statement Python reported; a change is matched by the statement it
sits in, so a changed row of a constant table (folded into one value at its first line) is not called
"never ran" while the table's assignment ran."""

from __future__ import annotations

from verl_e2e.plan.anchors import whole_statements

SOURCE = b"""class Bridge:
    CONFIG_MAPPING = [
        ("hidden_size", "hidden_size"),
        ("rms_norm_eps", "layernorm_epsilon"),
    ]

    def build(self, cfg):
        if (cfg.a and
                cfg.b):
            return 1
        return 2
"""


def test_a_row_of_a_table_brings_its_whole_assignment() -> None:
    assert whole_statements(SOURCE, [4]) == (2, 3, 4, 5)


def test_a_compound_statement_brings_its_header_not_its_body() -> None:
    assert whole_statements(SOURCE, [9]) == (8, 9)
    assert whole_statements(SOURCE, [10]) == (10,)


def test_without_a_parse_the_lines_stay_as_they_were() -> None:
    assert whole_statements(b"def broken(:\n", [1, 3]) == (1, 3)
    assert whole_statements(None, [4]) == (4,)
    assert whole_statements(SOURCE, None) is None
