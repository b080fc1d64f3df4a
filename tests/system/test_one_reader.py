"""One way to read a file another person can write (issue 64): the reader's checks, and a walk of the package
that fails on a direct read (``read_text``, ``read_bytes``, ``open(`` for reading, ``json.load``) outside it.

Why a walk: issue 52 added the checks to some readers one by one, and every reader written before or after them
lacked some (baselines had none of the device file's). A new reader of a baseline, a cache, a summary, a device
file, a history or a session folder must go through system/regular_files.py; a direct read of anything else is
listed below with why it reads no such file, so adding one is a decision a review sees.
"""

from __future__ import annotations

import ast
import os
import re
import socket
from pathlib import Path

import pytest

from pytest_sme2.system.regular_files import (
    BASELINE,
    DEVICE_FILE,
    KINDS,
    Kind,
    RefusedFile,
    open_checked,
    read_bytes,
    size_text,
)

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_sme2"

# module:function -> why its direct read is of no file another person writes (or is the one reader itself).
OWN_FILES = {
    "system/regular_files.py": "the one reader",
    "cli/calibrate.py:_local_cpu": "/proc/cpuinfo",
    "run/cpu.py:host_cpu": "/proc/cpuinfo",
    "evidence/perf_samples.py:_paranoid_level": "/proc/sys/kernel/perf_event_paranoid",
    "system/install_state.py:_editable_folder": "pip's metadata of this checkout's own install",
    "system/install_state.py:stale_reason": "this checkout's own pyproject.toml (make install, before any package)",
    "system/digests.py:_tree_digest": "pytest-sme2's own package sources (the result cache's code key)",
    "run/native/build.py:_sources_hash": "pytest-sme2's own native sources",
    "run/native/build.py:_run": "the build log this build writes",
    "run/native/kernel_kit.py:kit_library": "this module's own source",
    "model/registry.py:source_files": "the user's own model package (their code, which the session imports anyway)",
    "export/work.py:_xnnpack_graph": "a temp folder of its own, which flatc writes",
    "system/elf.py": "binaries the session runs (its runner, qemu, the executorch wheel's libraries)",
    "run/native/macho.py:read_macho": "the executorch wheel's dylibs (the macOS contract test)",
    "run/native/tensorfile.py:read_tensors": "the runner's outputs in this session's own folder (made by it)",
    "run/targets/native_runner.py": "the runner's result and log in this session's own folder (made by it)",
    "run/targets/host.py:_Worker.log_since": "the host worker's log in this session's own folder (made by it)",
    "run/callgrind.py:read_callgrind_total": "callgrind's output in this session's own folder (made by it)",
    "evidence/samplers.py:SimpleperfSampler.samples": "simpleperf's report, pulled into this session's own folder",
    "evidence/qemu_counts.py:ExecutedBlocks.from_files": "the counter's block table in the counted run's own "
    "working folder, written by it a moment before",
    "evidence/qemu_counts.py:tail_call_target": "the executorch wheel's XNNPACK library the session runs",
    "run/debian_archive.py:debian_mirror": "the system's own apt sources",
    "run/qemu_source_build.py:_fetch_source": "Debian's patch series in the source tree this build unpacked",
    "run/qemu_source_build.py:add_fast_path": "qemu's source in the tree this build unpacked, and our own source",
    "run/qemu_source_build.py:plugin_qemu_dir": "pytest-sme2's own native source (its digest names the folder)",
    "run/native/build.py:build_count_plugin": "the qemu-plugin.h this machine's qemu build installed",
    "run/emulation_setup.py:EmulationStatus.counting_note": "the reason the qemu build this machine ran wrote",
}
_READS = {"read_text", "read_bytes"}


def _is_read(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _READS:
        return func.attr
    if isinstance(func, ast.Attribute) and func.attr == "load" and getattr(func.value, "id", None) == "json":
        return "json.load"
    is_open = isinstance(func, ast.Name) and func.id == "open"
    is_path_open = isinstance(func, ast.Attribute) and func.attr == "open" and getattr(func.value, "id", "") != "os"
    if not (is_open or is_path_open):
        return None
    args = call.args[1:] if is_open else call.args
    mode = next((k.value for k in call.keywords if k.arg == "mode"), args[0] if args else None)
    text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
    return None if set(text) & set("wax+") else "open"


def direct_reads(package: Path = PACKAGE) -> list[str]:
    """``module:function:call:line`` of every direct read in the package (functions by dotted qualname)."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        scope: list[str] = []

        class Walk(ast.NodeVisitor):
            def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
                scope.append(node.name)
                self.generic_visit(node)
                scope.pop()

            visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

            def visit_Call(self, node: ast.Call) -> None:
                what = _is_read(node)
                if what:
                    found.append(f"{module}:{'.'.join(scope) or '<module>'}:{what}:{node.lineno}")
                self.generic_visit(node)

        Walk().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _allowed(site: str) -> bool:
    module, function = site.split(":")[:2]
    return module in OWN_FILES or f"{module}:{function}" in OWN_FILES


def test_every_read_of_a_file_others_write_goes_through_the_one_reader() -> None:
    unlisted = [site for site in direct_reads() if not _allowed(site)]
    assert not unlisted, (
        "direct reads outside system/regular_files.py (read baselines, caches, summaries, device files, history "
        "and session files with its read_bytes/read_text/open_checked and a kind; list a read of a file no one "
        f"else writes in OWN_FILES with why): {unlisted}"
    )


def test_the_walk_finds_each_form_of_a_direct_read(tmp_path: Path) -> None:
    """The walk itself: every form a new reader could take is found, and writes are not."""
    (tmp_path / "m.py").write_text(
        "import json\n"
        "def f(p):\n"
        "    p.read_text()\n    p.read_bytes()\n    open(p)\n    open(p, 'rb')\n    p.open(encoding='utf-8')\n"
        "    json.load(p)\n    open(p, 'w')\n    p.open('ab')\n    json.loads('1')\n"
    )
    assert [site.rsplit(":", 2)[1] for site in direct_reads(tmp_path)] == [
        "read_text",
        "read_bytes",
        "open",
        "open",
        "open",
        "json.load",
    ]


def test_every_allowed_entry_still_names_a_direct_read() -> None:
    """An entry whose read moved to the one reader is removed, so the list never hides a new one."""
    sites = direct_reads()
    stale = [
        name
        for name in OWN_FILES
        if name != "system/regular_files.py" and not any(site == name or site.startswith(name + ":") for site in sites)
    ]
    assert not stale, f"OWN_FILES entries with no direct read left: {stale}"


SMALL = Kind("test file", 16, "give a small one")


@pytest.mark.parametrize("made", ["fifo", "socket", "device"])
def test_what_is_not_a_regular_file_is_refused_by_its_kind_before_it_is_opened_to_block(
    tmp_path: Path, made: str
) -> None:
    path = tmp_path / made
    if made == "fifo":
        os.mkfifo(path)
        expected = "a FIFO (named pipe)"
    elif made == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        expected = "a socket"
    else:
        path.symlink_to("/dev/zero")
        expected = "a character device"
    with pytest.raises(RefusedFile) as info:
        read_bytes(path, SMALL)
    assert str(info.value) == f"the test file {path} is {expected}, not a regular file: give a small one"


def test_a_link_out_of_its_tree_is_refused_and_one_inside_is_read(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "secret"
    tree.mkdir()
    outside.write_text("secret")
    (tree / "inside").write_text("ok")
    (tree / "in").symlink_to(tree / "inside")
    (tree / "out").symlink_to(outside)
    assert read_bytes(tree / "in", SMALL, within=tree) == b"ok"
    with pytest.raises(RefusedFile, match=rf"is a link to {re.escape(str(outside))}, out of {re.escape(str(tree))}"):
        read_bytes(tree / "out", SMALL, within=tree)


def test_a_file_over_its_bound_is_refused_by_its_size_and_a_file_at_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 16)
    assert read_bytes(path, SMALL) == b"x" * 16
    path.write_bytes(b"x" * 17)
    with pytest.raises(RefusedFile, match="is 17 bytes, above the 16 bytes a test file can be: give a small one"):
        with open_checked(path, SMALL):
            pass


def test_every_kind_has_a_bound_and_a_fix_and_the_table_is_the_one_source() -> None:
    assert BASELINE in KINDS and DEVICE_FILE in KINDS and len({k.what for k in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert kind.limit >= 1 << 20 and kind.fix and size_text(kind.limit).endswith(("MiB", "GiB"))
