"""Build a qemu-aarch64 with TCG plugins and SME2 from Debian's source package, once per machine.

Why: Debian's binary qemu-user (11.1) is static and built without plugins, so the emulated target could count
instructions only from qemu's execution log: a line and a write(2) per executed block, 2.3-2.7x the uncounted
run and a trace that grows with the model. Debian's source package qemu 10.2.2 has FEAT_SME2 for linux-user and
the plugin API; built with plugins, pytest-sme2's own counting plugin (native/count_plugin.c) counts inside the
emulator for 4-21% over plain emulation (docs/performance.md, "What counting costs"). The source comes from
Debian's archive through a scratch apt configuration (as emulation_setup.py fetches the binary), so apt's
signatures and hashes vouch for it, and the system's apt sources are never touched. One change of our own goes in
(add_fast_path: qemu's fp32 SME outer product on the host's vector FMA, bit-identical; 97 s -> 3.7 s CPU for an
EfficientSAM 128x128 inference with SME2 on). What is kept: the
binary and the plugin header the plugin is built against; the 500 MB build tree is removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_sme2.errors import RunnerError
from pytest_sme2.run.debian_archive import apt_options, debian_mirror
from pytest_sme2.run.native.build import _run, cache_root
from pytest_sme2.system.locks import locked

SOURCE_VERSION = "1:10.2.2+ds-1"  # Debian's qemu source package: FEAT_SME2 in -cpu max, plugin API v5
SOURCE_SUITE = "sid"
LOWEST_WITH_SME2 = (10, 2)  # of this source package: FEAT_SME2 for linux-user (the probe checks it too)
# Debian packages the build needs: glib's headers (qemu and the plugin include glib.h), flex and bison (qemu's
# device-tree code), pkg-config; meson (bookworm's is too old), ninja and pycotap come from PyPI into a venv.
BUILD_PACKAGES = ("libglib2.0-dev", "flex", "bison", "pkg-config")
_PYPI_TOOLS = ("meson", "ninja", "pycotap")
_CONFIGURE = (
    "--target-list=aarch64-linux-user",
    "--enable-plugins",
    "--disable-docs",
    "--disable-werror",
    "--disable-install-blobs",
    "--disable-download",
)


# pytest-sme2's change to qemu (native/qemu_fmopa_s.c.inc: the fp32 SME outer product on the host's vector FMA,
# bit-identical to qemu's own arithmetic): included into this file before this function, which calls it first.
FAST_PATH = Path(__file__).resolve().parent / "native" / "qemu_fmopa_s.c.inc"
_PATCHED_FILE = Path("target/arm/tcg/sme_helper.c")
_FUNCTION = "static void do_fmopa_s(void *vza, void *vzn, void *vzm, uint16_t *pn,"
_FIRST_LINE = "    intptr_t row, col, oprsz = simd_maxsz(desc);\n"
_CALL = "    if (pytest_sme2_fmopa_s(vza, vzn, vzm, pn, pm, fpst, desc, negx, negf)) {\n        return;\n    }\n"
# and the fp32 vector FMA (native/qemu_fmla_s.c.inc: NEON and SVE FMLA by vector and by element, the same rule):
# it replaces the two lines of this file that generate those helpers
VECTOR_FAST_PATH = Path(__file__).resolve().parent / "native" / "qemu_fmla_s.c.inc"
_VECTOR_FILE = Path("target/arm/tcg/vec_helper.c")
_VECTOR_LINES = (
    "DO_MULADD(gvec_vfma_s, float32_muladd_f, float32)\n",
    "DO_FMLA_IDX(gvec_fmla_idx_s, float32, H4, 0, 0)\n",
)


def plugin_qemu_dir() -> Path:
    """Where the built qemu and its plugin header live: one folder per source version and version of our change."""
    digest = hashlib.sha256(FAST_PATH.read_bytes() + VECTOR_FAST_PATH.read_bytes()).hexdigest()[:8]
    return cache_root() / "qemu-plugins" / f"{SOURCE_VERSION.replace(':', '_')}-{digest}"


def plugin_qemu() -> Path:
    return plugin_qemu_dir() / "qemu-aarch64"


def plugin_header() -> Path:
    return plugin_qemu_dir() / "qemu-plugin.h"


def unavailable_note() -> Path:
    """Why the last build failed (read by status and doctor), beside the folder it would have filled."""
    return plugin_qemu_dir().with_name(plugin_qemu_dir().name + ".failed")


def missing_packages() -> list[str]:
    """The Debian build packages this machine lacks."""
    missing = []
    if not Path("/usr/include/glib-2.0/glib.h").exists():
        missing.append("libglib2.0-dev")
    for command, package in (("flex", "flex"), ("bison", "bison"), ("pkg-config", "pkg-config")):
        if shutil.which(command) is None:
            missing.append(package)
    return missing


def _install_packages(missing: list[str], log: Path) -> None:
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RunnerError(
            f"building qemu with plugins needs {' '.join(missing)}: `sudo apt-get install {' '.join(missing)}`, "
            f"then `pytest-sme2 setup-emulation` again"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
    _run(["apt-get", "install", "-y", "-qq", *missing], log, f"installing {' '.join(missing)}")


def _fetch_source(root: Path, log: Path) -> Path:
    """Download and unpack the source package with Debian's patches applied; the source tree's path."""
    for sub in ("lists/partial", "cache/archives/partial", "download"):
        (root / sub).mkdir(parents=True)
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    signed = f"[signed-by={keyring}] " if Path(keyring).exists() else ""
    (root / "sources.list").write_text(f"deb-src {signed}{debian_mirror()} {SOURCE_SUITE} main\n")
    options = apt_options(root)
    _run(["apt-get", *options, "update", "-qq"], log, "apt-get update (scratch deb-src configuration)")
    download = root / "download"
    with open(log, "ab") as out:
        fetched = subprocess.run(
            ["apt-get", *options, "source", "--download-only", f"qemu={SOURCE_VERSION}"],
            cwd=download,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    origs, debians = list(download.glob("qemu_*.orig.tar.*")), list(download.glob("qemu_*.debian.tar.*"))
    if fetched.returncode != 0 or not origs or not debians:
        raise RunnerError(
            f"Debian's source package qemu={SOURCE_VERSION} could not be downloaded from {debian_mirror()} "
            f"({SOURCE_SUITE}); see {log}"
        )
    _run(["tar", "-xf", str(origs[0]), "-C", str(root)], log, "unpacking qemu's source")
    trees = [p for p in root.glob("qemu-*") if p.is_dir()]
    if len(trees) != 1:
        raise RunnerError(f"qemu's source tarball unpacked into {len(trees)} folders; see {log}")
    tree = trees[0]
    _run(["tar", "-xf", str(debians[0]), "-C", str(tree)], log, "unpacking Debian's patches")
    series = tree / "debian" / "patches" / "series"
    for line in series.read_text().splitlines() if series.exists() else []:
        name = line.split("#", 1)[0].strip()
        if name:  # the +ds repack strips blobs; Debian's patches make the build skip them
            _run(["patch", "-p1", "-s", "-d", str(tree), "-i", str(series.parent / name)], log, f"patch {name}")
    add_fast_path(tree)
    return tree


def add_fast_path(tree: Path) -> None:
    """Include pytest-sme2's fp32 fast paths into qemu: the outer product's into its SME helpers (FAST_PATH), the
    vector FMA's into its vector helpers (VECTOR_FAST_PATH)."""
    helper = tree / _PATCHED_FILE
    text = helper.read_text()
    at = text.find(_FUNCTION)
    first = -1 if at < 0 else text.find(_FIRST_LINE, at)
    if at < 0 or first < 0 or text.count(_FUNCTION) != 1:
        raise RunnerError(
            f"qemu {SOURCE_VERSION}'s {_PATCHED_FILE} has no do_fmopa_s as pytest-sme2 expects; its fast path "
            "cannot be added (a pytest-sme2 bug: report it with the qemu source version)"
        )
    shutil.copyfile(FAST_PATH, helper.parent / "pytest_sme2_fmopa_s.c.inc")
    end = first + len(_FIRST_LINE)
    patched = text[:at] + '#include "pytest_sme2_fmopa_s.c.inc"\n\n' + text[at:end] + _CALL + text[end:]
    helper.write_text(patched)
    vector = tree / _VECTOR_FILE
    text = vector.read_text()
    if any(text.count(line) != 1 for line in _VECTOR_LINES):
        raise RunnerError(
            f"qemu {SOURCE_VERSION}'s {_VECTOR_FILE} does not generate gvec_vfma_s and gvec_fmla_idx_s as pytest-sme2 "
            "expects; their fast path cannot be added (a pytest-sme2 bug: report it with the qemu source version)"
        )
    shutil.copyfile(VECTOR_FAST_PATH, vector.parent / "pytest_sme2_fmla_s.c.inc")
    vfma, fmla_idx = _VECTOR_LINES
    vector.write_text(text.replace(vfma, '#include "pytest_sme2_fmla_s.c.inc"\n').replace(fmla_idx, ""))


def build_plugin_qemu(force: bool = False) -> Path:
    """The plugin-capable qemu-aarch64, built here if it is not yet (about 2-4 minutes on 2 cores)."""
    target, folder = plugin_qemu(), plugin_qemu_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with locked(folder.parent / f"{folder.name}.lock"):
        if target.exists() and plugin_header().exists() and not force:
            return target
        log = folder.parent / f"{folder.name}.build.log"
        log.write_text("")
        try:
            for tool in ("apt-get", "patch", "tar"):
                if shutil.which(tool) is None:
                    raise RunnerError(f"building qemu from Debian's source package needs {tool} (Debian/Ubuntu)")
            _install_packages(missing_packages(), log)
            with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as scratch:
                root = Path(scratch)
                tree = _fetch_source(root, log)
                venv = root / "venv"
                _run([sys.executable, "-m", "venv", str(venv)], log, "a venv for qemu's build tools")
                _run([str(venv / "bin" / "pip"), "install", "-q", *_PYPI_TOOLS], log, "pip install meson ninja")
                build = tree / "build"
                build.mkdir()
                env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
                configure = [str(tree / "configure"), *_CONFIGURE, f"--python={venv / 'bin' / 'python3'}"]
                with open(log, "ab") as out:
                    for command, what in (
                        (configure, "configuring qemu"),
                        ([str(venv / "bin" / "ninja"), "-j", str(os.cpu_count() or 2), "qemu-aarch64"], "ninja"),
                    ):
                        done = subprocess.run(
                            command,
                            cwd=build,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            env=env,
                        )
                        if done.returncode != 0:
                            raise RunnerError(f"{what} failed (exit {done.returncode}); see {log}")
                staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
                shutil.copy2(build / "qemu-aarch64", staging / "qemu-aarch64")
                shutil.copy2(tree / "include" / "qemu" / "qemu-plugin.h", staging / "qemu-plugin.h")
                if folder.exists():
                    shutil.rmtree(folder)
                os.replace(staging, folder)
        except RunnerError as exc:
            unavailable_note().write_text(f"{exc}\n")
            raise
        unavailable_note().unlink(missing_ok=True)
    return target
