"""`make install` says which torch build pip installed and its size, from the packages' metadata.

Each case runs the script as the Makefile does (by path, in a fresh Python) over made-up dist-info folders first
on the path, shaped as pip installs torch 2.13.0 from PyPI on Linux x86 (its GPU libraries behind
cuda-toolkit's extras, which require each other) or from PyTorch's CPU index.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "pytest_sme2" / "system" / "torch_build.py"
CUDA_TORCH = [
    'cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
    "sympy>=1.13.3",
]


def _dist(site: Path, name: str, version: str, size: int, requires: tuple[str, ...] = ()) -> None:
    """A dist-info as pip writes it: METADATA with the requirements, RECORD with one file of ``size`` bytes."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text(f"{name.replace('-', '_')}/lib.so,sha256=x,{size}\n{info.name}/METADATA,,\n")


def _said(site: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--torch", "2.13.0"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return done.stdout


def test_the_cuda_build_is_named_with_its_size_and_the_cpu_index_command(tmp_path: Path) -> None:
    _dist(tmp_path, "torch", "2.13.0", 1_000_000_000, tuple(CUDA_TORCH))
    _dist(
        tmp_path,
        "cuda-toolkit",
        "13.0.3.0",
        1_000,
        (
            'nvidia-cublas==13.1.1.3; extra == "cublas"',
            'nvidia-cuda-runtime==13.0.96; extra == "cudart"',
            'nvidia-cufft==12.0.0.61; extra == "cufft"',
        ),
    )
    _dist(tmp_path, "nvidia-cublas", "13.1.1.3", 600_000_000)
    _dist(tmp_path, "nvidia-cuda-runtime", "13.0.96", 9_000)
    _dist(tmp_path, "nvidia-cudnn-cu13", "9.20.0.48", 900_000_000, ("nvidia-cublas",))
    _dist(tmp_path, "triton", "3.7.1", 500_000_000)
    _dist(tmp_path, "sympy", "1.14.0", 70_000_000)  # a requirement of every build: not counted
    said = _said(tmp_path)
    assert "torch 2.13.0 is the CUDA build: 3.0 GB with 5 GPU packages (2.0 GB)" in said
    assert "pip uninstall -y torch cuda-toolkit nvidia-cublas nvidia-cuda-runtime nvidia-cudnn-cu13 triton" in said
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in said
    assert "make install TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in said


def test_the_cpu_build_is_said_with_its_size(tmp_path: Path) -> None:
    _dist(tmp_path, "torch", "2.13.0+cpu", 700_000_000, ("sympy>=1.13.3",))
    _dist(tmp_path, "sympy", "1.14.0", 70_000_000)
    assert _said(tmp_path) == "install: torch 2.13.0+cpu, the CPU build (0.7 GB)\n"


def test_a_cuda_version_without_gpu_packages_is_still_the_cuda_build(tmp_path: Path) -> None:
    _dist(tmp_path, "torch", "2.13.0+cu130", 2_000_000_000)
    assert "torch 2.13.0+cu130 is the CUDA build" in _said(tmp_path)
