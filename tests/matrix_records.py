"""The shipped matrix.yaml with one family's record replaced, for tests of the records a real run adds
(`cannot_run`, `no_critic`, `merged_lora`): written to a temporary file so the loader checks it whole."""

from __future__ import annotations

from pathlib import Path

import yaml

from verl_e2e.config.matrix import default_matrix_path


def with_record(tmp_path: Path, family: str, key: str, record: dict[str, object] | None) -> Path:
    """matrix.yaml with `family`'s `key` set to `record` (or removed where None); the file's path."""
    doc = yaml.safe_load(default_matrix_path().read_text(encoding="utf-8"))
    doc["families"][family].pop(key, None)
    if record is not None:
        doc["families"][family][key] = record
    out = tmp_path / "matrix.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out
