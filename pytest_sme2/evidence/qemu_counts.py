"""Deterministic instruction counts per ETDump event, from one traced inference under qemu.

Emulated time is the emulator's; what the guest executes is exact. ``native/exec_counter.c`` compacts
qemu's execution log; this module cuts it into ETDump events without help from the program and checks
the counts against the ETDump files. How, and why the counts repeat exactly: docs/history.md,
"How evidence/qemu_counts.py cuts events".
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pytest_sme2.errors import RunnerError
from pytest_sme2.evidence.block_sequence import BlockSequence, FullSequence, MarkedSequence
from pytest_sme2.evidence.instruction_classes import NAMES, SME_CLASSES, SVE_CLASSES, check_header, total
from pytest_sme2.system.elf import FunctionSymbols, function_symbols
from pytest_sme2.system.regular_files import RESULT_RECORD, RefusedFile, read_text
from pytest_sme2.system.safe_files import write_file

if TYPE_CHECKING:
    from pytest_sme2.evidence.etdump import ExecutionTrace

QEMU_LOG_FLAGS = ("-d", "in_asm,exec,nochain")
ETDUMP_LIBRARY = "libexecutorch_etdump.so"
XNNPACK_LIBRARY = "libexecutorch_backend_xnnpack.so"
_START = (
    "_ZN10executorch6etdump9ETDumpGen15start_profilingEPKcij",
    "_ZN10executorch6etdump9ETDumpGen24start_profiling_delegateEPKci",
)
_END = (
    "_ZN10executorch6etdump9ETDumpGen13end_profilingENS_7runtime16EventTracerEntryE",
    "_ZN10executorch6etdump9ETDumpGen22end_profiling_delegateENS_7runtime16EventTracerEntryEPKvm",
)
_LOG = ("_ZN10executorch6etdump9ETDumpGen22log_profiling_delegateEPKcimmPKvm",)
_RUN_OPERATOR = "xnn_run_operator"
_INVOKE_RUNTIME = "xnn_invoke_runtime"
_MAPS_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+)\s+(\S+)\s+([0-9a-f]+)\s+\S+\s+\d+\s+(/.+?)\s*$")
RUNTIME, DELEGATE = "runtime", "delegate"
_EMPTY = Path("/dev/null")  # no sequence file: the plugin's block table alone


@dataclass(frozen=True)
class ExecutedBlocks:
    """The blocks thread 0 executed, in order, with their instruction counts (exec_counter's output)."""

    pcs: np.ndarray  # uint64 guest address of each block id
    instructions: np.ndarray  # int64 per block id
    classes: np.ndarray  # int64 (block id, class of instruction_classes.NAMES): instructions of each class
    sequence: BlockSequence  # the order they ran in: the whole of it (the log) or at its markers (the plugin)

    @property
    def sme(self) -> np.ndarray:
        """SME instructions (SME encodings, SMSTART/SMSTOP) per block id."""
        return total(self.classes, SME_CLASSES)

    @property
    def sve(self) -> np.ndarray:
        """SVE instructions (streaming SVE in streaming mode) per block id."""
        return total(self.classes, SVE_CLASSES)

    @classmethod
    def from_files(cls, blocks_tsv: Path, sequence: Path) -> "ExecutedBlocks":
        lines = Path(blocks_tsv).read_text().splitlines()
        check_header(lines[0].split() if lines else [], str(blocks_tsv))
        width = 2 + len(NAMES)
        rows = [line.split() for line in lines[1:] if line.strip()]
        if any(len(row) != width for row in rows):
            raise RunnerError(f"{blocks_tsv} is not exec_counter's block table ({width} columns per line)")
        table = (
            np.array([[int(r[0], 16), *map(int, r[1:])] for r in rows], dtype=np.uint64)
            if rows
            else np.zeros((0, width), dtype=np.uint64)
        )
        order = np.zeros(0, np.int64) if sequence == _EMPTY else np.fromfile(sequence, dtype="<u4").astype(np.int64)
        if order.size and order.max() >= len(rows):
            raise RunnerError(f"{sequence} names block {int(order.max())}, but {blocks_tsv} has {len(rows)} blocks")
        counts = table[:, 1:].astype(np.int64)
        if (counts[:, 1:].sum(axis=1) != counts[:, 0]).any():
            raise RunnerError(f"{blocks_tsv}: a block's instruction classes do not add up to its instructions")
        return cls(table[:, 0], counts[:, 0], counts[:, 1:], FullSequence(order))

    @classmethod
    def from_plugin(cls, blocks_tsv: Path, segments: Path) -> "ExecutedBlocks":
        """The counting plugin's block table (exec_counter's format) and its segments (block_sequence.py)."""
        full = cls.from_files(blocks_tsv, _EMPTY)
        return cls(full.pcs, full.instructions, full.classes, MarkedSequence.from_file(segments, full.pcs.size))


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    path: str


class AddressSpace:
    """Where each library was loaded (a copy of the guest's /proc/self/maps) and its function symbols."""

    def __init__(self, maps_text: str):
        self.text = maps_text
        self.mappings = []
        for line in maps_text.splitlines():
            match = _MAPS_LINE.match(line)
            if match and "x" in match.group(3):
                self.mappings.append(
                    _Mapping(int(match.group(1), 16), int(match.group(2), 16), int(match.group(4), 16), match.group(5))
                )
        self._symbols: dict[str, FunctionSymbols] = {}

    @classmethod
    def of_libraries(cls, libraries: Sequence[tuple[str, int]]) -> "AddressSpace":
        """The address space a loader's trace describes ((path, load bias) per library): each library's loaded
        segments where the bias puts them, as a memory map would show them."""
        lines = []
        for named, bias in libraries:
            path = os.path.realpath(named)  # as a memory map names it ("lib/../lib/x.so" is "lib/x.so")
            try:
                loads = function_symbols(Path(path)).loads
            except OSError:
                continue
            for vaddr, offset, size in loads:
                lines.append(f"{bias + vaddr:x}-{bias + vaddr + size:x} r-xp {offset:08x} 00:00 0 {path}")
        return cls("\n".join(lines) + "\n")

    @classmethod
    def from_file(cls, maps: Path) -> "AddressSpace":
        try:
            return cls(read_text(maps, RESULT_RECORD, errors="replace"))
        except (OSError, RefusedFile) as exc:
            raise RunnerError(f"the traced run left no memory map ({maps}): {exc}") from None

    def symbols(self, path: str) -> FunctionSymbols:
        if path not in self._symbols:
            try:
                self._symbols[path] = function_symbols(Path(path))
            except OSError:
                self._symbols[path] = FunctionSymbols((), (), (), ())  # gone or unreadable: unnamed
        return self._symbols[path]

    def library(self, suffix: str) -> str:
        """The path of the one loaded library whose file name is ``suffix``."""
        paths = sorted({m.path for m in self.mappings if Path(m.path).name == suffix})
        if len(paths) != 1:
            raise RunnerError(f"the traced run loaded {len(paths)} copies of {suffix} ({paths}); expected one")
        return paths[0]

    def runtime_address(self, path: str, vaddr: int) -> int:
        """Where the code at ``vaddr`` of the library ``path`` was in the guest."""
        symbols = self.symbols(path)
        offset = next((vaddr - va + off for va, off, size in symbols.loads if va <= vaddr < va + size), None)
        if offset is not None:
            for m in self.mappings:
                if m.path == path and m.offset <= offset < m.offset + (m.end - m.start):
                    return m.start + offset - m.offset
        raise RunnerError(f"address {vaddr:#x} of {path} is not in any executable mapping of the traced run")

    def function_range(self, path: str, name: str) -> tuple[int, int]:
        """Guest [start, end) of the function symbol ``name`` in library ``path``."""
        symbols = self.symbols(path)
        try:
            index = symbols.names.index(name)
        except ValueError:
            raise RunnerError(
                f"{path} exports no function {name}; per-event instruction counts need it "
                f"(was executorch built differently?)"
            ) from None
        start = self.runtime_address(path, symbols.starts[index])
        return start, start + symbols.ends[index] - symbols.starts[index]

    def locate(self, address: int) -> tuple[str | None, str | None]:
        """(library path, function name) of a guest address; names are None where no symbol covers it."""
        for m in self.mappings:
            if m.start <= address < m.end:
                return m.path, self.symbols(m.path).at_file_offset(address - m.start + m.offset)
        return None, None


def tail_call_target(path: str, symbols: FunctionSymbols, name: str) -> int:
    """The virtual address that function ``name`` ends by branching to (its first unconditional B).

    ``xnn_run_operator`` is a four-instruction wrapper that tail-calls XNNPACK's
    internal ``xnn_run_operator_with_index``, the function ``xnn_invoke_runtime``
    calls once per operator.
    """
    index = symbols.names.index(name)
    start, end = symbols.starts[index], symbols.ends[index]
    data = Path(path).read_bytes()
    offset = next((start - va + off for va, off, size in symbols.loads if va <= start < va + size), None)
    if offset is None:
        raise RunnerError(f"{name} of {path} is not in a loaded segment")
    for at in range(0, min(end - start, 64), 4):
        (word,) = struct.unpack_from("<I", data, offset + at)
        if word >> 26 == 0b000101:  # B imm26
            imm = word & 0x3FFFFFF
            if imm & 0x2000000:
                imm -= 1 << 26
            return start + at + imm * 4
    raise RunnerError(
        f"{name} of {path} does not tail-call another function; per-operator instruction counts "
        f"need XNNPACK's operator entry point"
    )


@dataclass
class EventCounts:
    """Instruction counts of every ETDump event the traced run appended, in append order."""

    kinds: list[str]  # RUNTIME or DELEGATE per event
    instructions: np.ndarray
    classes: np.ndarray  # (event, class of instruction_classes.NAMES)
    functions: list[dict[str, int]]  # per event: instructions per executed function ("library:function")
    # per event: where it began, in instructions counted since the process started (the profiler's own
    # left out, as from every count): the timeline's axis. An operator whose node ran in several stretches
    # begins where its first began.
    starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def sme(self) -> np.ndarray:
        return total(self.classes, SME_CLASSES)

    @property
    def sve(self) -> np.ndarray:
        return total(self.classes, SVE_CLASSES)


def _function_labels(blocks: ExecutedBlocks, space: AddressSpace) -> list[str]:
    labels = []
    for pc in blocks.pcs.tolist():
        path, name = space.locate(int(pc))
        library = Path(path).name if path else "?"
        labels.append(f"{library}:{name}" if name else f"{library}:(unnamed)")
    return labels


def _check_delegate_calls(kinds: Sequence[str], instructions: Sequence[int] | np.ndarray) -> None:
    """Each batch of logged operators is followed by the end of the delegate call they ran in, so together they
    cannot hold more instructions than that call: more means an operator was given another call's work (an
    attribution gone wrong, as before a node's several operators were grouped), which must not reach a Profile."""
    inside, batch = 0, 0
    for kind, count in zip(kinds, instructions):
        if kind == DELEGATE:
            inside, batch = inside + count, batch + 1
        elif batch:
            if inside > count:
                raise RunnerError(
                    f"{batch} logged XNNPACK operator(s) hold {inside:,} instructions, more than the "
                    f"{count:,} of the delegate call they ran in; per-operator instruction counts "
                    f"cannot be attributed"
                )
            inside, batch = 0, 0


def _logs_in_batch(boundary_kinds: Sequence[str], first: int) -> int:
    """How many log calls follow one another from ``first``: the profiler logs all of a delegate call's nodes in
    one loop, after they ran."""
    end = first
    while end < len(boundary_kinds) and boundary_kinds[end] == "log":
        end += 1
    return end - first


def _nodes(runs: Sequence[tuple[int, int]], logged: int) -> list[list[tuple[int, int]]]:
    """The operator runs of one delegate call grouped into the ``logged`` nodes the profiler logs, in order.

    XNNPACK's profiler logs a node once, however many operators it runs (a concatenation runs one copy per
    input, up to five), and its runtime loop runs a node's operators one after another with only its inner
    loop between them, while between two nodes it also checks the node's remaining operator slots and moves
    to the next node. So the runs of one node are those separated by the shortest stretches of blocks: with
    ``logged`` nodes, the ``logged - 1`` longest stretches separate nodes. A run count below the logged count
    is an error: a logged node that never ran cannot be attributed.
    """
    if len(runs) < logged:
        raise RunnerError(
            f"XNNPACK logged {logged} operators after {len(runs)} ran; per-operator instruction counts "
            f"cannot be attributed"
        )
    if len(runs) == logged:
        return [[run] for run in runs]
    gaps = [(runs[i][0] - runs[i - 1][1], i) for i in range(1, len(runs))]
    cuts = sorted(i for _, i in sorted(gaps, key=lambda g: (-g[0], g[1]))[: logged - 1])
    bounds = [0, *cuts, len(runs)]
    return [list(runs[a:b]) for a, b in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class Boundaries:
    """Where a run's ETDump events and XNNPACK operators begin and end: the profiler's entry points, XNNPACK's
    operator worker and the range of ``xnn_invoke_runtime`` (guest addresses), and the profiler's own code."""

    etdump: str  # the profiler library's path
    starts: frozenset[int]
    ends: frozenset[int]
    logs: frozenset[int]
    worker: int | None  # None: no XNNPACK in the run (no operator events)
    invoke: tuple[int, int] | None

    def marker_lines(self) -> str:
        """The counting plugin's markers file (count_plugin.c): every block where an event can begin or end."""
        pcs = sorted(self.starts | self.ends | self.logs | ({self.worker} if self.worker is not None else set()))
        lines = [f"pc {pc:x}" for pc in pcs]
        if self.invoke is not None:
            lines.append(f"range {self.invoke[0]:x} {self.invoke[1]:x}")
        return "\n".join(lines) + "\n"


def boundaries(space: AddressSpace) -> Boundaries:
    """The :class:`Boundaries` of the libraries ``space`` maps (see count_events)."""
    etdump_path = space.library(ETDUMP_LIBRARY)
    etdump = space.symbols(etdump_path)

    def entries(names: Sequence[str]) -> frozenset[int]:
        return frozenset(space.function_range(etdump_path, n)[0] for n in names if n in etdump.names)

    starts, ends, logs = entries(_START), entries(_END), entries(_LOG)
    if not starts or not ends or not logs:
        raise RunnerError(f"{etdump_path} lacks ETDumpGen's profiling entry points; cannot cut events")
    worker, invoke = None, None
    xnnpack = next((m.path for m in space.mappings if Path(m.path).name == XNNPACK_LIBRARY), None)
    if xnnpack is not None:
        symbols = space.symbols(xnnpack)
        if _RUN_OPERATOR in symbols.names and _INVOKE_RUNTIME in symbols.names:
            worker = space.runtime_address(xnnpack, tail_call_target(xnnpack, symbols, _RUN_OPERATOR))
            invoke = space.function_range(xnnpack, _INVOKE_RUNTIME)
    return Boundaries(etdump_path, starts, ends, logs, worker, invoke)


_Segment = tuple[int, np.ndarray, dict[str, int]]  # instructions, per instruction class, per function


@dataclass(frozen=True)
class _Counter:
    """What a stretch of the block sequence counted, the profiler's own instructions left out: one event's
    instructions, per class and per function, and where in the count an event began."""

    seq: BlockSequence
    counted: np.ndarray  # per block: its instructions, 0 in the profiler
    counted_classes: np.ndarray  # per block and instruction class
    labels: list[str]  # per block: the function it is in
    position_of: Callable[[int], int]  # counted instructions executed before a position of the sequence

    def segment(self, *ranges: tuple[int, int]) -> _Segment:
        """The instructions of the sequence's ``ranges`` (from, to positions), in all, per class and per function."""
        executions = self.seq.executions(ranges, self.counted.size)
        per_block = executions * self.counted
        functions: dict[str, int] = {}
        for block in np.flatnonzero(per_block).tolist():
            functions[self.labels[block]] = functions.get(self.labels[block], 0) + int(per_block[block])
        return int(per_block.sum()), executions @ self.counted_classes, functions


def _in_mappings(pcs: np.ndarray, space: AddressSpace, path: str) -> np.ndarray:
    """Which blocks lie in the library ``path`` as ``space`` maps it."""
    inside = np.zeros(pcs.size, dtype=bool)
    for m in space.mappings:
        if m.path == path:
            inside |= (pcs >= m.start) & (pcs < m.end)
    return inside


def _operator_stretches(seq: BlockSequence, pcs: np.ndarray, bounds: Boundaries) -> list[tuple[int, int]]:
    """XNNPACK operators: from the worker's entry to the next block of xnn_invoke_runtime, as positions."""
    op_entry = np.zeros(pcs.size, dtype=bool) if bounds.worker is None else pcs == bounds.worker
    in_invoke = np.zeros(pcs.size, dtype=bool)
    if bounds.invoke is not None:
        in_invoke = (pcs >= bounds.invoke[0]) & (pcs < bounds.invoke[1])
    op_positions = seq.positions(op_entry)
    invoke_positions = seq.positions(in_invoke)
    stretches = []
    for position in op_positions.tolist():
        after = np.searchsorted(invoke_positions, position)
        if after >= invoke_positions.size:
            raise RunnerError("an XNNPACK operator never returned to xnn_invoke_runtime in the traced run")
        stretches.append((position, int(invoke_positions[after])))
    return stretches


def count_events(blocks: ExecutedBlocks, space: AddressSpace, bounds: Boundaries | None = None) -> EventCounts:
    """Cut the executed block sequence into ETDump events (see the module docstring); ``bounds``: ``space``'s
    boundaries when the caller has them already (they read XNNPACK's library to find its operator entry)."""
    bounds = bounds or boundaries(space)
    pcs = blocks.pcs.astype(np.int64)
    in_tracer = _in_mappings(pcs, space, bounds.etdump)
    is_start, is_end, is_log = (np.isin(pcs, list(s)) for s in (bounds.starts, bounds.ends, bounds.logs))
    seq = blocks.sequence
    counted = np.where(in_tracer, 0, blocks.instructions)  # the profiler's own instructions are no event's
    counter = _Counter(
        seq,
        counted,
        np.where(in_tracer[:, None], 0, blocks.classes),
        _function_labels(blocks, space),
        seq.counted_before(counted),
    )
    op_queue_positions = _operator_stretches(seq, pcs, bounds)
    boundary = seq.positions(is_start | is_end | is_log)
    boundary_kinds = [
        ("start" if is_start[b] else "end" if is_end[b] else "log") for b in seq.blocks_at(boundary).tolist()
    ]
    kinds, values, event_starts = _cut_events(counter, boundary.tolist(), boundary_kinds, op_queue_positions)
    instructions = np.array([v[0] for v in values], dtype=np.int64)
    _check_delegate_calls(kinds, instructions)
    return EventCounts(
        kinds=kinds,
        instructions=instructions,
        classes=np.array([v[1] for v in values], dtype=np.int64).reshape(len(values), len(NAMES)),
        functions=[v[2] for v in values],
        starts=np.array(event_starts, dtype=np.int64),
    )


def _cut_events(
    counter: _Counter, boundary: list[int], boundary_kinds: list[str], op_queue_positions: list[tuple[int, int]]
) -> tuple[list[str], list[_Segment], list[int]]:
    """The events in the order the profiler wrote them: each one's kind, counts and start, from the positions
    where the profiler starts, ends and logs events and the stretches XNNPACK's operators ran."""
    pending_ops: list[_Segment] = []
    kinds: list[str] = []
    values: list[_Segment] = []
    event_starts: list[int] = []
    pending_starts: list[int] = []
    stack: list[int] = []
    next_op = 0
    runs: list[tuple[int, int]] = []  # operator runs since the profiler last logged
    for index, position in enumerate(boundary):
        # Operators that ran before this point join the runs the profiler's next log calls account for.
        while next_op < len(op_queue_positions) and op_queue_positions[next_op][0] < position:
            runs.append(op_queue_positions[next_op])
            next_op += 1
        kind = boundary_kinds[index]
        if kind == "start":
            stack.append(position)
        elif kind == "end":
            if not stack:
                raise RunnerError("the traced run ended a profiling event it never started")
            # Operators that ran without being logged before an event ended are that event's own work, never a
            # later logged node's: XNNPACK runs a quantized program's operators while Method::init sets it up
            # (57 runs for mobilenet int8), and a queue carried over shifted every operator of the first
            # inference by that many. The profiler logs a delegate call's nodes before the call ends.
            runs = []
            kinds.append(RUNTIME)
            begin = stack.pop()
            event_starts.append(counter.position_of(begin))
            values.append(counter.segment((begin, position)))
        else:  # log_profiling_delegate: the profiler logs every node it ran, in order, once they have all run
            if not pending_ops:
                nodes = _nodes(runs, _logs_in_batch(boundary_kinds, index))
                pending_ops.extend(counter.segment(*node) for node in nodes)
                pending_starts.extend(counter.position_of(node[0][0]) for node in nodes)
                runs = []
            kinds.append(DELEGATE)
            values.append(pending_ops.pop(0))
            event_starts.append(pending_starts.pop(0))
    return kinds, values, event_starts


COUNTS_FILE = "instructions.json"
# 2 added "classes", 3 "starts" (where each event began: the timeline); older files are still read
COUNTS_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
TOP_FUNCTIONS = 12  # functions kept per event in the counts file (the kernels of an operator)


def _split_by_file(counts: EventCounts, timed: Path, warmup: Path | None) -> dict[str, slice]:
    """Which events of ``counts`` belong to which ETDump file (warmup first: it was written first),
    after checking that every event is of the kind the file says."""
    files = [("warmup", warmup)] if warmup is not None else []
    files.append(("timed", timed))
    from pytest_sme2.evidence.etdump import event_kinds

    slices, start = {}, 0
    for name, path in files:
        delegated = event_kinds(path)
        stop = start + delegated.size
        expected = [DELEGATE if d else RUNTIME for d in delegated.tolist()]
        if counts.kinds[start:stop] != expected:
            raise RunnerError(
                f"the traced run's {len(counts)} counted events do not line up with the events of {path} "
                f"(events {start}-{stop}); per-event instruction counts cannot be trusted for this run"
            )
        slices[name] = slice(start, stop)
        start = stop
    if start != len(counts):
        raise RunnerError(f"the traced run counted {len(counts)} events, its ETDump files hold {start}")
    return slices


def write_counts(counts: EventCounts, timed: Path | None, warmup: Path | None, path: Path) -> Path:
    """Per ETDump file, the instructions, SME and SVE instructions, instructions per class and top functions
    of each event."""
    import json

    if timed is None:
        raise RunnerError("a counted run needs its ETDump (etdump on)")
    files: dict[str, object] = {}
    document: dict[str, object] = {"version": COUNTS_VERSION, "files": files}
    for name, part in _split_by_file(counts, Path(timed), None if warmup is None else Path(warmup)).items():
        files[name] = {
            "instructions": counts.instructions[part].tolist(),
            "sme": counts.sme[part].tolist(),
            "sve": counts.sve[part].tolist(),
            "classes": {name: counts.classes[part, column].tolist() for column, name in enumerate(NAMES)},
            "functions": [
                dict(sorted(f.items(), key=lambda kv: -kv[1])[:TOP_FUNCTIONS]) for f in counts.functions[part]
            ],
            **({"starts": counts.starts[part].tolist()} if counts.starts is not None else {}),
        }
    write_file(path, json.dumps(document) + "\n")
    return Path(path)


def read_counts(path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """The format version and per-file counts written by :func:`write_counts` (``{"timed": {...}, ...}``)."""
    import json

    try:
        document = json.loads(read_text(path, RESULT_RECORD))
    except (OSError, ValueError, RefusedFile) as exc:
        raise RunnerError(f"instruction counts {path} cannot be read ({exc}); run the test again") from None
    if not isinstance(document, dict) or document.get("version") not in _READABLE_VERSIONS:
        raise RunnerError(
            f"instruction counts {path} are not in a version of pytest-sme2's format this one reads "
            f"({', '.join(map(str, _READABLE_VERSIONS))}); run the test again to count them anew"
        )
    return document["version"], document["files"]


@dataclass
class InstructionTrace:
    """A counted run's events measured in instructions: the same ETDump events, ops and runs as the time
    trace of that run, with instructions, SME and SVE instructions in place of milliseconds."""

    instructions: "ExecutionTrace"
    sme: "ExecutionTrace"
    sve: "ExecutionTrace"
    functions: list[dict[str, int]]  # per op of ``instructions.ops``: its top functions (first run)
    source: str = ""  # the counts file
    # per class of instruction_classes.NAMES, the same events counted in that class; None for counts written
    # before classes were counted (format version 1)
    classes: "dict[str, ExecutionTrace] | None" = None

    @classmethod
    def from_counts(cls, counts: Path, timed: Path, warmup: Path | None) -> "InstructionTrace":
        from pytest_sme2.evidence.etdump import read_run

        version, files = read_counts(counts)
        if "timed" not in files or (warmup is not None and "warmup" not in files):
            raise RunnerError(
                f"instruction counts {counts} lack the {'timed' if 'timed' not in files else 'warmup'} "
                f"file's events"
            )

        def trace(key: str, column: str | None = None) -> "ExecutionTrace":
            def values(file: str) -> np.ndarray:
                return np.asarray(files[file][key] if column is None else files[file][key][column])

            # where the events began (version 3): the instruction trace keeps its spans, the timeline's axis
            positioned = key == "instructions" and all("starts" in part for part in files.values())
            return read_run(
                timed,
                warmup,
                ticks_per_ms=1.0,
                unit="instructions",
                values=(values("timed"), None if warmup is None else values("warmup")),
                starts=(
                    np.asarray(files["timed"]["starts"]),
                    None if warmup is None else np.asarray(files["warmup"]["starts"]),
                )
                if positioned
                else None,
            )

        instructions = trace("instructions")
        functions = []
        for file_index, event_index in instructions.op_events if instructions.op_events is not None else []:
            per_event = files["timed"]["functions"] if int(file_index) == 0 else []
            functions.append(dict(per_event[int(event_index)]) if int(event_index) < len(per_event) else {})
        classes = None
        if version >= 2:  # version 1 files predate instruction classes
            missing = [n for part in files.values() for n in NAMES if n not in part.get("classes", {})]
            if missing:
                raise RunnerError(
                    f"instruction counts {counts} lack the instruction class(es) {sorted(set(missing))}; "
                    f"run the test again to count them anew"
                )
            classes = {name: trace("classes", name) for name in NAMES}
        return cls(instructions, trace("sme"), trace("sve"), functions, str(counts), classes)

    @classmethod
    def concat(cls, parts: "list[InstructionTrace]") -> "InstructionTrace":
        """The counted runs of several chunks of one variant as one (see Profile.concat)."""
        from pytest_sme2.evidence.etdump import ExecutionTrace

        merged = ExecutionTrace.concat([p.instructions for p in parts])
        by_key: dict[Any, dict[str, int]] = {}
        for part in parts:
            for key, functions in zip(part.instructions.ops, part.functions):
                by_key.setdefault(key, functions)
        per_part = [p.classes for p in parts if p.classes is not None]
        classes = None
        if len(per_part) == len(parts):
            classes = {name: ExecutionTrace.concat([c[name] for c in per_part]) for name in NAMES}
        return cls(
            merged,
            ExecutionTrace.concat([p.sme for p in parts]),
            ExecutionTrace.concat([p.sve for p in parts]),
            [by_key.get(key, {}) for key in merged.ops],
            parts[0].source,
            classes,
        )
