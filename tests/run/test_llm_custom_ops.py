"""Programs with ExecuTorch's LLM custom ops (llama::custom_sdpa, llama::update_cache): where their kernels come
from, and what each target does with such a program.

Real export of the bundled tiny_llama (ExecuTorch's own Llama with its source transformations), real runtime on
the host target; on an x86 runner (local target here), which has no kernel kit, the real runner's own refusal,
named. The aarch64 runner's kit: tests/run/test_kernel_kit.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from helpers_versions import needs_binding_etdump, needs_runtime_libraries

from pytest_sme2 import Recipe, assert_outputs_match
from pytest_sme2.errors import ProgramError, UsageError
from pytest_sme2.measure.runner import Runner
from pytest_sme2.run.kernel_libraries import (
    binding_libraries,
    missing_kernel_error,
    missing_operators,
)
from pytest_sme2.run.targets import RunSpec

# What the aarch64 runner's log held for tiny_llama (executorch 1.5.1's method loader, copied from a real run).
RUNNER_LOG = """I 00:00:00.071039 executorch:operator_registry.cpp:278] ]
E 00:00:00.098658 executorch:method.cpp:822] Missing operator: [8] llama::update_cache.out
E 00:00:00.099070 executorch:method.cpp:822] Missing operator: [8] llama::update_cache.out
E 00:00:00.099305 executorch:method.cpp:822] Missing operator: [10] llama::custom_sdpa.out
E 00:00:00.100173 executorch:method.cpp:1128] There are 6 instructions don't have corresponding operator registered.
sme2_runner: cannot load method 'forward' of program.pte (error 0x14)
"""


def test_missing_operators_are_read_once_each_in_log_order() -> None:
    assert missing_operators(RUNNER_LOG) == ["llama::update_cache.out", "llama::custom_sdpa.out"]
    assert missing_operators("sme2_runner: cannot open program.pte") == []


def test_the_first_line_names_operators_target_and_where_the_kernels_are() -> None:
    error = missing_kernel_error(["llama::custom_sdpa.out"], "model.pte", "local", "/x/runner.log")
    first = str(error).splitlines()[0]
    assert first.startswith("model.pte needs operator(s) llama::custom_sdpa.out, which the local target's")
    assert "libcustom_ops_aot_lib.so" in first and "--sme2-target=host" in first
    assert "or on a Linux target" in first


def test_an_operator_no_known_library_provides_is_said_so() -> None:
    first = str(missing_kernel_error(["mylib::fused.out"], "m.pte", "local", "log")).splitlines()[0]
    assert "no kernel library pytest-sme2 knows registers them" in first and "mylib::fused.out" in first


def _program(path: Path, flatbuffer: bytes, segments: bytes) -> Path:
    """A file laid out like a .pte: 8 bytes, the extended header ("eh00", length, program size), then data."""
    header = b"\0\0\0\0ET12" + b"eh00" + (32).to_bytes(4, "little")
    size = 40 + len(flatbuffer)
    header += size.to_bytes(8, "little") + size.to_bytes(8, "little") + len(segments).to_bytes(8, "little")
    path.write_bytes(header + flatbuffer + segments)
    return path


def test_binding_loads_the_llm_library_only_for_programs_naming_its_ops(tmp_path: Path) -> None:
    named = _program(tmp_path / "named.pte", b"....llama::custom_sdpa....", b"")
    assert [Path(p).name for p in binding_libraries(named)] == ["libcustom_ops_aot_lib.so"]
    # The same bytes in the segments (constants, delegate blobs) are data, not an operator name.
    in_data = _program(tmp_path / "data.pte", b"....aten::mm....", b"llama::custom_sdpa")
    assert binding_libraries(in_data) == []


@pytest.mark.parametrize("program_size", [1 << 62, 60 << 30])
def test_a_crafted_program_size_is_an_error_naming_the_file_not_a_memory_error(
    tmp_path: Path, program_size: int
) -> None:
    """Issue 64 (bad 3): a 66 KB .pte whose extended header gives a program size of 2^62 (or 60 GiB) was a bare
    MemoryError traceback from reading that many bytes, on every target."""
    crafted = _program(tmp_path / "crafted.pte", b"\0" * 66_000, b"")
    data = bytearray(crafted.read_bytes())
    data[16:24] = program_size.to_bytes(8, "little")
    crafted.write_bytes(bytes(data))
    with pytest.raises(ProgramError) as info:
        binding_libraries(crafted)
    message = str(info.value)
    assert f"program {crafted} is not a whole ExecuTorch program" in message
    assert f"a program size of {program_size} bytes, and the file holds {len(data)}" in message
    assert "export it again" in message


def test_a_program_that_is_a_fifo_is_refused_by_its_kind(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.pte"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=rf"the program {re.escape(str(fifo))} is a FIFO \(named pipe\)"):
        binding_libraries(fifo)


@needs_binding_etdump
def test_host_target_runs_executorch_llm_custom_ops(bundled_sessions) -> None:  # noqa: ANN001
    """No step from the user: the host worker loads ExecuTorch's LLM kernel library because the program names its
    ops; the runs match PyTorch eager, and the custom kernels show as non-delegated operators in their categories."""
    session = bundled_sessions("host")
    exported = session.export("tiny_llama", Recipe())
    profile = Runner(session, RunSpec(runs=3, warmup=1), session.test_dir("tiny-llama-host")).profile(exported)
    assert_outputs_match(profile, exported)
    portable = dict(zip(profile.portable_ops["kind"], profile.portable_ops["category"]))
    # Two layers: one cache update of keys and values each, one attention per layer.
    assert portable["llama::custom_sdpa"] == "GEMM"
    assert portable["llama::update_cache"] == "DATA_MOVEMENT"
    counts = dict(zip(profile.portable_ops["kind"], profile.portable_ops["count"]))  # instances in the program
    assert counts["llama::custom_sdpa"] == 2 and counts["llama::update_cache"] == 4
    assert "llama::custom_sdpa" not in profile.unclassified_ops


@needs_runtime_libraries
def test_the_local_target_s_own_runner_runs_them_through_its_kernel_kit(bundled_sessions) -> None:  # noqa: ANN001
    """This machine's own (x86_64) runner on the local target, prefill then decode: the kit of the installed
    package's library; the last decode step's logits are the eager model's."""
    from helpers_llm import eager_sequence, last_output

    from pytest_sme2.measure.llm import LlmSequence, llm_phases

    session = bundled_sessions("local")
    exported = session.export("tiny_llama", Recipe())
    sequence = LlmSequence(prefill=7, decode=3)
    example = tuple(torch.load(exported.inputs_path, weights_only=True))
    phases = llm_phases(
        exported,
        Runner(session, RunSpec(runs=3, warmup=1, max_rounds=1), session.test_dir("tiny-llama-local")),
        sequence,
        example,
    )
    _, last = eager_sequence(session.registry.get("tiny_llama"), sequence)
    torch.testing.assert_close(last_output(phases.decode), last, rtol=1e-4, atol=1e-4)
    log = Path(phases.decode.artifacts["log"]).read_text()
    assert "--kernel_library=" in log and "kernel-kit-" in log and "linux-x86_64" in log


def test_a_macos_runner_names_the_missing_kernels_and_the_way_out() -> None:
    first = str(missing_kernel_error(["llama::custom_sdpa.out"], "m.pte", "local", "log")).splitlines()[0]
    assert "a macOS runner or a user's own runner build lacks it" in first and "--sme2-target=host" in first
