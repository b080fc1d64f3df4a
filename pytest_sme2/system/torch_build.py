"""Which torch build pip installed and how much disk it takes: said right after `make install` installs torch.

Why: pytest-sme2 runs models on the CPU only, but on a plain package index (PyPI) Linux x86 gets torch's CUDA
build whatever its Python: the same version number, plus several GB of ``nvidia-*`` packages and triton
(a venv of 5.5 GB against 1.7 GB with the CPU build). The user should learn that from the install, with the
command that gets the CPU build where their network reaches PyTorch's own index, not from a full disk.

Read from the installed packages' metadata, never by importing torch (a second and more); standard library
only, because the Makefile runs this file by path (``python pytest_sme2/system/torch_build.py``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from importlib import metadata

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The packages a CUDA build of torch brings for the GPU: NVIDIA's libraries, CUDA's Python bindings, triton.
GPU_PACKAGE = re.compile(r"^(nvidia-|cuda-|triton$|pytorch-triton)", re.IGNORECASE)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class TorchBuild:
    """The installed torch: its version, the GPU packages it brought, and bytes on disk of each."""

    version: str
    torch_bytes: int
    gpu_packages: dict[str, int]  # name -> bytes

    @property
    def is_cuda(self) -> bool:
        return bool(self.gpu_packages) or "+cu" in self.version

    @property
    def total_bytes(self) -> int:
        return self.torch_bytes + sum(self.gpu_packages.values())


def _bytes(dist: metadata.Distribution) -> int:
    """The installed size pip recorded (RECORD's sizes), without reading the files."""
    return sum(f.size or 0 for f in dist.files or [])


def _required(dist: metadata.Distribution) -> list[str]:
    return [m.group(1) for text in dist.requires or [] if (m := _NAME.match(text))]


def installed_torch() -> TorchBuild | None:
    """The installed torch build, or None when torch is not installed."""
    try:
        torch = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    gpu: dict[str, int] = {}
    pending = [name for name in _required(torch) if GPU_PACKAGE.match(name)]
    while pending:  # NVIDIA's packages require each other (cudnn needs cublas): the whole closure is the payload
        name = pending.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in gpu:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # a requirement whose marker excludes this platform
            continue
        gpu[key] = _bytes(dist)
        pending += [n for n in _required(dist) if GPU_PACKAGE.match(n)]
    return TorchBuild(torch.version, _bytes(torch), gpu)


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def report(build: TorchBuild | None, pin: str) -> str:
    """What ``make install`` says after installing torch."""
    if build is None:
        return (
            f"install: torch is not installed; install the CPU build: pip install torch=={pin} --index-url {CPU_INDEX}"
        )
    if not build.is_cuda:
        return f"install: torch {build.version}, the CPU build ({_gb(build.total_bytes)})"
    names = " ".join(sorted(build.gpu_packages))
    return (
        f"install: torch {build.version} is the CUDA build: {_gb(build.total_bytes)} with "
        f"{len(build.gpu_packages)} GPU packages ({_gb(sum(build.gpu_packages.values()))}), none of which "
        f"pytest-sme2 uses (it runs models on the CPU). PyTorch's own index serves the CPU build; where your "
        f"network reaches it:\n"
        f"    pip uninstall -y torch {names}\n"
        f"    pip install torch=={pin} --index-url {CPU_INDEX}\n"
        f"or next time: make install TORCH_INDEX_URL={CPU_INDEX}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", required=True, help="the torch version the Makefile pins")
    print(report(installed_torch(), parser.parse_args(argv).torch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
