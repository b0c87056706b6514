"""tools/build_mamba.sh and tools/mamba_smoke.py, how an offline node gets Megatron-Core's Mamba kernels: the
sdists' setup.py cut to one GPU architecture, and a build that names what is missing before compiling.
The setup.py double below keeps the shape both real ones have (causal-conv1d 1.7.0, mamba-ssm 2.3.2: a
`cc_flag` list of -gencode pairs filled by CUDA version, then the `# HACK` comment); the compile itself
needs nvcc and a CUDA torch and runs on the GPU node only."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

SETUP_DOUBLE = """
bare_metal_version = (13, 0)
if True:  # `if not SKIP_CUDA_BUILD:` in the real files
    cc_flag = []
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_75,code=sm_75")
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_80,code=sm_80")
    if bare_metal_version >= (11, 8):
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_90,code=sm_90")
    if bare_metal_version >= (13, 0):
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_121,code=sm_121")


    # HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI is set to be the same as
    # torch._C._GLIBCXX_USE_CXX11_ABI
    nvcc_flags = ["-O3", "-std=c++17"] + cc_flag
"""


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mamba_smoke", ROOT / "tools" / "mamba_smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_patched_setup_builds_one_architecture() -> None:
    scope: dict[str, object] = {}
    exec(_tool().patched(SETUP_DOUBLE, "90"), scope)  # the double is this file's own text
    assert scope["nvcc_flags"] == ["-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90"]


def test_a_setup_without_the_marker_is_refused(tmp_path: Path) -> None:
    setup = tmp_path / "setup.py"
    setup.write_text(SETUP_DOUBLE.replace("# HACK", "# note"), encoding="utf-8")
    done = subprocess.run(
        ["python3", str(ROOT / "tools" / "mamba_smoke.py"), "--patch", str(setup), "90"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "# HACK" in done.stderr
    assert setup.read_text(encoding="utf-8") == SETUP_DOUBLE.replace("# HACK", "# note")  # left as it was


def test_an_architecture_with_a_dot_is_bad_input(tmp_path: Path) -> None:
    setup = tmp_path / "setup.py"
    setup.write_text(SETUP_DOUBLE, encoding="utf-8")
    done = subprocess.run(
        ["python3", str(ROOT / "tools" / "mamba_smoke.py"), "--patch", str(setup), "9.0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "digits" in done.stderr


@pytest.mark.parametrize(
    ("present", "named"),
    [
        ((), "causal_conv1d-*.tar.gz"),
        (("causal_conv1d-1.7.0.tar.gz", "mamba_ssm-2.3.2.post1.tar.gz", "wheel-0.45.1-py3-none-any.whl",
          "setuptools-80.9.0-py3-none-any.whl", "packaging-25.0-py3-none-any.whl"), "einops-*.whl"),
    ],
)  # fmt: skip
def test_the_build_names_what_src_lacks_before_it_installs_or_compiles(
    tmp_path: Path, present: tuple[str, ...], named: str
) -> None:
    src, site, out = tmp_path / "src", tmp_path / "site", tmp_path / "out"
    src.mkdir()
    for name in present:
        (src / name).write_bytes(b"")
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "build_mamba.sh"), str(src), str(site), str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"lacks {named}" in done.stdout
    assert not out.exists() and not site.exists()  # nothing built, nothing installed
