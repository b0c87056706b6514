"""tools/build_mamba.sh and tools/mamba_smoke.py, how an offline node gets Megatron-Core's Mamba kernels: the
sdists' setup.py cut to one GPU architecture, and a build that names what is missing before compiling.
The setup.py double below keeps the shape both real ones have (causal-conv1d 1.7.0, mamba-ssm 2.3.2: a
`cc_flag` list of -gencode pairs filled by CUDA version, then the `# HACK` comment); the compile itself
needs nvcc and a CUDA torch and runs on the GPU node only."""

from __future__ import annotations

import importlib.util
import subprocess
import tarfile
import zipfile
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


def _wheel(where: Path, name: str, version: str, tag: str, body: str) -> Path:
    """A minimal wheel of the real layout (package, dist-info with METADATA, WHEEL and RECORD), which pip
    installs like the ones tools/build_mamba.sh builds."""
    path = where / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
        zf.writestr(f"{info}/RECORD", "".join(f"{arc},,\n" for arc in [*files, f"{info}/RECORD"]))
    return path


def test_wheels_an_earlier_build_made_are_installed_without_nvcc_or_a_compile(tmp_path: Path) -> None:
    """This machine has no nvcc: the prebuilt path must install and import before any compiler is looked
    for. The smoke then stops for want of torch here, which is the one step the GPU node adds."""
    src, site, out = tmp_path / "src", tmp_path / "site", tmp_path / "out"
    src.mkdir()
    py = subprocess.run(  # the python3 the script runs (the node's is 3.12; the wheels are built for it)
        ["python3", "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    tag = f"{py}-{py}-linux_x86_64"
    _wheel(src, "mamba_ssm", "2.3.2.post1", tag, "__version__ = '2.3.2.post1'\n")
    _wheel(src, "causal_conv1d", "1.7.0", tag, "__version__ = '1.7.0'\n")
    _wheel(src, "einops", "0.8.2", "py3-none-any", "")
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "build_mamba.sh"), str(src), str(site), str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert f"no compile: mamba_ssm-2.3.2.post1-{tag}.whl" in done.stdout, done.stdout + done.stderr
    assert "MAMBA IMPORT OK 2.3.2.post1" in done.stdout
    assert (site / "causal_conv1d" / "__init__.py").exists() and (site / "einops").is_dir()
    assert not (out / "build").exists() and "nvcc" not in done.stdout  # nothing unpacked, nothing compiled


def test_the_node_packs_the_wheels_it_built_into_parts_that_join_back(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "mamba" / "wheels").mkdir(parents=True)
    built = work / "mamba" / "wheels" / "mamba_ssm-2.3.2.post1-cp312-cp312-linux_x86_64.whl"
    built.write_bytes(bytes(range(256)) * 9000)  # about 2.2 MiB: three parts of 1 MiB
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "node_batch.sh"), "wheels", str(work), str(out), "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parts = sorted(out.glob("mamba-wheels.tar.part-*"))
    assert len(parts) == 3
    joined = tmp_path / "joined.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        tar.extractall(tmp_path / "back", filter="data")
    assert (tmp_path / "back" / built.name).read_bytes() == built.read_bytes()
    empty = subprocess.run(
        ["bash", str(ROOT / "tools" / "node_batch.sh"), "wheels", str(tmp_path / "none"), str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "has no wheels" in empty.stderr
