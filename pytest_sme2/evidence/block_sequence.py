"""The order in which a counted run executed its blocks, as qemu_counts.py cuts events from it.

Two sources give it. qemu's execution log (exec_counter.c) gives every block id in execution order: the whole
sequence, which grows with the model's work (3.3 million ids for one mobilenet inference). The counting plugin
(count_plugin.c) gives only the blocks where events and operators begin and end ("markers"), each with its
position in that sequence and how often every block ran since the previous marker: what grows with the number
of events. qemu_counts.py asks only questions both can answer exactly (where the marked blocks ran, what ran
between two of those places, how many instructions ran before one), so both give the same counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from pytest_sme2.errors import RunnerError

NO_MARKER = (1 << 64) - 1  # the plugin's last record: what ran after the last marker


class BlockSequence(Protocol):
    """What qemu_counts.count_events asks of a run's block sequence; positions index that sequence."""

    def positions(self, mask: np.ndarray) -> np.ndarray:
        """Sorted positions at which a block with ``mask[block]`` set ran."""
        ...

    def blocks_at(self, positions: np.ndarray) -> np.ndarray:
        """The block ids at these positions (each one a position :meth:`positions` gave)."""
        ...

    def executions(self, ranges: Sequence[tuple[int, int]], blocks: int) -> np.ndarray:
        """How often each of ``blocks`` block ids ran in the positions [begin, end) of every range."""
        ...

    def counted_before(self, weights: np.ndarray) -> Callable[[int], int]:
        """A function of a position: the sum of ``weights[block]`` over every block that ran before it."""
        ...

    def executed(self, blocks: int) -> np.ndarray:
        """How often each block id ran in the whole sequence."""
        ...


class FullSequence:
    """Every executed block id in order (qemu's execution log, through exec_counter)."""

    def __init__(self, ids: np.ndarray):
        self.ids = np.asarray(ids, dtype=np.int64)

    def positions(self, mask: np.ndarray) -> np.ndarray:
        return np.flatnonzero(mask[self.ids])

    def blocks_at(self, positions: np.ndarray) -> np.ndarray:
        return self.ids[positions]

    def executions(self, ranges: Sequence[tuple[int, int]], blocks: int) -> np.ndarray:
        total = np.zeros(blocks, dtype=np.int64)
        for begin, end in ranges:
            total += np.bincount(self.ids[begin:end], minlength=blocks)
        return total

    def counted_before(self, weights: np.ndarray) -> Callable[[int], int]:
        prefix = np.concatenate([[0], np.cumsum(weights[self.ids])])
        return lambda position: int(prefix[position])

    def executed(self, blocks: int) -> np.ndarray:
        return np.bincount(self.ids, minlength=blocks)


class MarkedSequence:
    """The marked blocks' positions and what ran between them (the counting plugin's segments file).

    Row k holds the executions of positions [position of marker k-1, position of marker k): the previous
    marker's own block and everything after it, up to this marker's block. The last row (after the last
    marker) ends the run.
    """

    def __init__(
        self,
        marker_ids: np.ndarray,
        marker_positions: np.ndarray,
        rows: np.ndarray,
        pair_ids: np.ndarray,
        pair_counts: np.ndarray,
    ):
        self.marker_ids = marker_ids
        self.marker_positions = marker_positions
        self.rows = rows  # pair offsets: row k's pairs are pair_ids[rows[k]:rows[k + 1]]
        self.pair_ids = pair_ids
        self.pair_counts = pair_counts
        self._ran: np.ndarray | None = None  # executed() of every block, asked once per positions() otherwise

    @classmethod
    def from_file(cls, path: Path, blocks: int) -> "MarkedSequence":
        """Read the plugin's records (count_plugin.c: [marker, position, pairs N, N x (block, executions)])."""
        words = np.fromfile(path, dtype="<u8")
        ids, positions, starts = [], [], [0]
        spans = []  # (first word of the pairs, pairs) per record
        at, ended = 0, False
        while at < words.size:
            if at + 3 > words.size:
                raise RunnerError(f"the counting plugin's segments file {path} ends inside a record")
            marker, position, pairs = (int(w) for w in words[at : at + 3])
            if at + 3 + 2 * pairs > words.size:
                raise RunnerError(f"the counting plugin's segments file {path} ends inside a record")
            spans.append((at + 3, pairs))
            starts.append(starts[-1] + pairs)
            at += 3 + 2 * pairs
            if marker == NO_MARKER:
                ended = at == words.size
                break
            ids.append(marker)
            positions.append(position)
        if not ended:
            raise RunnerError(
                f"the counting plugin's segments file {path} has no end record: the emulated run did not exit "
                "normally, so its counts are incomplete"
            )
        pair_words = np.concatenate([words[a : a + 2 * n] for a, n in spans]) if spans else np.zeros(0, "<u8")
        pair_ids = pair_words[0::2].astype(np.int64)
        if pair_ids.size and int(pair_ids.max()) >= blocks:
            raise RunnerError(f"{path} names block {int(pair_ids.max())}, but the run translated {blocks} blocks")
        marker_ids = np.asarray(ids, dtype=np.int64)
        if marker_ids.size and int(marker_ids.max()) >= blocks:
            raise RunnerError(f"{path} names marker block {int(marker_ids.max())} of {blocks}")
        marker_positions = np.asarray(positions, dtype=np.int64)
        if marker_positions.size > 1 and (np.diff(marker_positions) <= 0).any():
            raise RunnerError(f"{path}: marker positions do not increase; the counts cannot be read")
        return cls(
            marker_ids,
            marker_positions,
            np.asarray(starts, dtype=np.int64),
            pair_ids,
            pair_words[1::2].astype(np.int64),
        )

    def _index(self, position: int) -> int:
        index = int(np.searchsorted(self.marker_positions, position))
        if index >= self.marker_positions.size or int(self.marker_positions[index]) != position:
            raise RunnerError(f"position {position} of the counted run is not a marked block's")
        return index

    def positions(self, mask: np.ndarray) -> np.ndarray:
        unmarked = mask.copy()
        unmarked[self.marker_ids] = False
        if self._ran is None or self._ran.size != mask.size:
            self._ran = self.executed(mask.size) > 0
        ran = self._ran
        if (unmarked & ran).any():
            block = int(np.flatnonzero(unmarked & ran)[0])
            raise RunnerError(
                f"block {block} of the counted run starts an event or operator but the counting plugin was not "
                "told to mark it; the markers and the run's address space disagree, so no count is kept"
            )
        return self.marker_positions[mask[self.marker_ids]]

    def blocks_at(self, positions: np.ndarray) -> np.ndarray:
        return self.marker_ids[[self._index(int(p)) for p in np.asarray(positions).tolist()]]

    def executions(self, ranges: Sequence[tuple[int, int]], blocks: int) -> np.ndarray:
        total = np.zeros(blocks, dtype=np.int64)
        for begin, end in ranges:
            first, last = self.rows[self._index(begin) + 1], self.rows[self._index(end) + 1]
            np.add.at(total, self.pair_ids[first:last], self.pair_counts[first:last])
        return total

    def counted_before(self, weights: np.ndarray) -> Callable[[int], int]:
        prefix = np.concatenate([[0], np.cumsum(self.pair_counts * weights[self.pair_ids])])
        return lambda position: int(prefix[self.rows[self._index(position) + 1]])

    def executed(self, blocks: int) -> np.ndarray:
        total = np.zeros(blocks, dtype=np.int64)
        np.add.at(total, self.pair_ids, self.pair_counts)
        return total
