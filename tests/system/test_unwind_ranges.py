"""Function bounds from the unwind tables of the real executorch libraries (kernel naming without symbols)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import executorch
import pytest
from helpers_versions import needs_runtime_libraries

from pytest_sme2.system.elf import function_symbols, unwind_function_ranges

XNNPACK_LIB = Path(list(executorch.__path__)[0]) / "lib" / "libexecutorch_backend_xnnpack.so"


@needs_runtime_libraries
def test_every_named_function_of_the_xnnpack_library_has_its_exact_unwind_range() -> None:
    ranges = unwind_function_ranges(XNNPACK_LIB)
    symbols = function_symbols(XNNPACK_LIB)
    bounds = dict(ranges)
    assert len(symbols.starts) > 100
    assert all(bounds.get(start) == end for start, end in zip(symbols.starts, symbols.ends))
    # Far more functions than names: the unnamed kernels are what the unwind table adds.
    assert len(ranges) > 3 * len(symbols.starts)
    assert all(start < end for start, end in ranges)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")
@needs_runtime_libraries
def test_unwind_ranges_agree_with_readelf() -> None:
    listing = subprocess.run(
        ["readelf", "--debug-dump=frames", str(XNNPACK_LIB)], capture_output=True, text=True, check=True
    ).stdout
    expected = sorted((int(a, 16), int(b, 16)) for a, b in re.findall(r" FDE cie=\w+ pc=(\w+)\.\.(\w+)", listing))
    assert unwind_function_ranges(XNNPACK_LIB) == expected


def test_a_file_without_unwind_tables_has_no_ranges(tmp_path: Path) -> None:
    (tmp_path / "script.sh").write_text("#!/bin/sh\n")
    assert unwind_function_ranges(tmp_path / "script.sh") == []
