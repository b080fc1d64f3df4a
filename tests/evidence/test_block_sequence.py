"""The counting plugin's marked sequence answers every question qemu_counts.py asks exactly as the full sequence.

The segments file is written here the way count_plugin.c writes it (one record per executed marker: the blocks
that ran since the previous one), from a random full sequence; both readers are then asked the same questions.
The plugin itself is checked against qemu's log on real runs in tests/run/test_counting_plugin.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.evidence.block_sequence import NO_MARKER, FullSequence, MarkedSequence


def _segments(ids: np.ndarray, markers: set[int], path: Path) -> Path:
    """What the plugin writes for this execution order: at each marker block, the executions since the last."""
    words: list[int] = []
    since: dict[int, int] = {}
    for position, block in enumerate(ids.tolist()):
        if block in markers:
            words += [block, position, len(since)]
            for pair in sorted(since.items()):
                words += list(pair)
            since = {}
        since[block] = since.get(block, 0) + 1
    words += [NO_MARKER, len(ids), len(since)]
    for pair in sorted(since.items()):
        words += list(pair)
    np.asarray(words, dtype="<u8").tofile(path)
    return path


@pytest.fixture
def both(tmp_path: Path) -> tuple[FullSequence, MarkedSequence, np.ndarray, int]:
    rng = np.random.default_rng(7)
    blocks = 40
    ids = rng.integers(0, blocks, size=5_000)
    mask = np.zeros(blocks, dtype=bool)
    mask[[3, 11, 17, 29]] = True
    marked = MarkedSequence.from_file(_segments(ids, set(np.flatnonzero(mask).tolist()), tmp_path / "s.u64"), blocks)
    return FullSequence(ids), marked, mask, blocks


def test_positions_blocks_and_executions_between_markers_match_the_full_sequence(both) -> None:
    full, marked, mask, blocks = both
    positions = full.positions(mask)
    assert positions.size > 100
    assert marked.positions(mask).tolist() == positions.tolist()
    assert (
        marked.positions(np.isin(np.arange(blocks), [11])).tolist()
        == full.positions(np.isin(np.arange(blocks), [11])).tolist()
    )
    assert marked.blocks_at(positions[:50]).tolist() == full.blocks_at(positions[:50]).tolist()
    ranges = [(int(positions[i]), int(positions[i + 3])) for i in range(0, 60, 7)]
    assert marked.executions(ranges, blocks).tolist() == full.executions(ranges, blocks).tolist()
    assert marked.executed(blocks).tolist() == full.executed(blocks).tolist()
    weights = np.arange(blocks, dtype=np.int64) * 3 + 1
    before_full, before_marked = full.counted_before(weights), marked.counted_before(weights)
    assert [before_marked(int(p)) for p in positions[::9]] == [before_full(int(p)) for p in positions[::9]]


def test_a_block_that_starts_an_event_but_was_not_marked_is_refused(both) -> None:
    _, marked, mask, blocks = both
    wider = mask.copy()
    wider[5] = True  # ran, but the plugin was not told to mark it
    with pytest.raises(RunnerError, match="block 5 .* not told to mark it"):
        marked.positions(wider)


def test_a_position_that_is_no_markers_is_refused(both) -> None:
    full, marked, mask, blocks = both
    with pytest.raises(RunnerError, match="not a marked block"):
        marked.executions([(int(full.positions(mask)[0]) + 1, int(full.positions(mask)[4]))], blocks)


def test_a_segments_file_cut_short_says_the_run_did_not_exit(tmp_path: Path) -> None:
    ids = np.array([0, 1, 2, 1, 2, 0, 1], dtype=np.int64)
    path = _segments(ids, {1}, tmp_path / "s.u64")
    words = np.fromfile(path, dtype="<u8")
    words[: words.size - 5].tofile(path)  # the end record lost, as when qemu is killed
    with pytest.raises(RunnerError, match="ends inside a record|no end record"):
        MarkedSequence.from_file(path, 3)
    _segments(ids, {1}, path)
    words = np.fromfile(path, dtype="<u8")
    words[:5].tofile(path)  # one whole record (marker 1 after block 0 ran once) and nothing after it
    with pytest.raises(RunnerError, match="no end record"):
        MarkedSequence.from_file(path, 3)


def test_a_segments_file_naming_a_block_never_translated_is_refused(tmp_path: Path) -> None:
    path = _segments(np.array([0, 1, 5, 1], dtype=np.int64), {1}, tmp_path / "s.u64")
    with pytest.raises(RunnerError, match="names block 5"):
        MarkedSequence.from_file(path, 3)
