"""Level 4's VLM cell sends a picture with every prompt: the task's files are what verl's multimodal dataset
reads (parquet rows with an `<image>` placeholder and PNG bytes), its reward scores the colour, the driver
makes it for a cell whose cache lacks it, and the tiny VLMs' chat template turns the picture into the
tokens their processor expands."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pyarrow.parquet as pq
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
sys.path.insert(0, str(ROOT / "tools"))
import image_task  # noqa: E402 - the task writer (standard library; pyarrow when writing)
from prepare import prepare_data  # noqa: E402
from records import Recorder  # noqa: E402

from tiny_processor import chat_template  # noqa: E402


def _chunks(data: bytes) -> dict[bytes, bytes]:
    """A PNG's chunks by type, each CRC checked as a decoder does."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    found, at = {}, 8
    while at < len(data):
        (size,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + size]
        (crc,) = struct.unpack(">I", data[at + 8 + size : at + 12 + size])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        found[kind], at = body, at + 12 + size
    return found


def test_a_picture_is_a_valid_png_of_one_colour() -> None:
    chunks = _chunks(image_task.png((1, 2, 3), 5))
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, kind = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (width, height, depth, kind) == (5, 5, 8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    assert raw == (b"\x00" + bytes((1, 2, 3)) * 5) * 5


def test_the_parquet_holds_one_picture_per_prompt_and_its_colour(tmp_path: Path) -> None:
    written = image_task.write(tmp_path, train=12, test=4, size=8, seed=3)
    assert [p.name for p in written] == ["train.parquet", "test.parquet", "reward.py"]
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(rows) == 12 and len(pq.read_table(tmp_path / "test.parquet").to_pylist()) == 4
    for row in rows:
        (message,) = row["prompt"]
        assert message["content"].count("<image>") == len(row["images"]) == 1
        truth = row["reward_model"]["ground_truth"]
        body = zlib.decompress(_chunks(row["images"][0]["bytes"])[b"IDAT"])
        assert body[1:4] == bytes(image_task.COLOURS[truth])
    assert len({r["reward_model"]["ground_truth"] for r in rows}) > 1
    again = tmp_path / "again"
    image_task.write(again, train=12, test=4, size=8, seed=3)
    assert pq.read_table(again / "train.parquet").to_pylist() == rows


def test_the_reward_scores_the_last_word_against_the_colour(tmp_path: Path) -> None:
    image_task.write(tmp_path, train=1, test=1, size=4)
    scope: dict[str, object] = {}
    exec((tmp_path / "reward.py").read_text(), scope)
    score = scope["compute_score"]
    assert callable(score)
    assert score("verl_e2e/colours", "The picture is Red.", "red") == 1.0
    assert score("verl_e2e/colours", "red? no, blue", "red") == 0.0
    assert score("verl_e2e/colours", "", "red") == 0.0


@pytest.mark.parametrize(("train", "size"), [(0, 64), (4, 0)])
def test_bad_sizes_exit_2(tmp_path: Path, train: int, size: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert image_task.main([str(tmp_path), "--train", str(train), "--size", str(size)]) == 2
    assert "must be positive" in capsys.readouterr().err


def test_the_driver_makes_the_task_for_a_cell_whose_cache_lacks_it(tmp_path: Path) -> None:
    cell = {"phases": [{"name": "run"}]}
    rec = Recorder(tmp_path / "out", cell)
    env = {"TRAIN_FILES": "/cache/datasets/images/train.parquet", "VAL_FILES": "/cache/datasets/images/test.parquet"}
    assert prepare_data(env, tmp_path, rec, {}, tmp_path / "work") is None
    made = tmp_path / "work" / "data" / "images"
    assert rec.overrides == {"TRAIN_FILES": str(made / "train.parquet"), "VAL_FILES": str(made / "test.parquet")}
    assert (str(Path("/cache/datasets/images")), str(made)) in rec.arg_paths  # the reward's path follows
    assert (made / "reward.py").is_file()


class _Tokenizer:
    """Stands in for the tiny tokenizer with Qwen's vision tokens added (ids past the 400-token vocabulary)."""

    names: ClassVar[dict[int, str]] = {401: "<|vision_start|>", 402: "<|vision_end|>", 403: "<|image_pad|>"}

    def convert_ids_to_tokens(self, index: int) -> str:
        return self.names[index]


def _render(template: str, messages: list[dict[str, object]]) -> str:
    """Rendered as transformers renders chat templates (a sandboxed Jinja2 with trimmed blocks)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def test_the_chat_template_puts_a_picture_between_the_vision_tokens() -> None:
    config = SimpleNamespace(vision_start_token_id=401, vision_end_token_id=402, image_token_id=403)
    processor = SimpleNamespace(image_token="<|image_pad|>", video_token="<|video_pad|>")
    template = chat_template(config, _Tokenizer(), processor)
    parts = [{"type": "image", "image": "x"}, {"type": "text", "text": "What colour?"}]
    rendered = _render(template, [{"role": "user", "content": parts}])
    assert rendered == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour?<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = _render(template, [{"role": "user", "content": "What is 2 + 2?"}])
    assert plain == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"  # the tokenizer's ChatML


def test_without_vision_start_and_end_the_picture_is_the_image_token_alone() -> None:
    processor = SimpleNamespace(image_token="<start_of_image>")
    template = chat_template(SimpleNamespace(image_token_index=7), _Tokenizer(), processor)
    rendered = _render(template, [{"role": "user", "content": [{"type": "image"}, {"type": "video"}]}])
    assert rendered.startswith("<|im_start|>user\n<start_of_image><|im_end|>")
