"""The one place that knows ETDump structure.

Reads ETDump flatbuffers (ExecuTorch's ``etdump_schema_flatcc.fbs``) directly
and turns them into an :class:`ExecutionTrace`: per-run Method::execute time,
per-run time inside DELEGATE_CALLs, and a matrix of per-run operator times.

Why not ``executorch.devtools.Inspector``: on a 100-run ETDump of a small
model it spends ~0.3 s converting flatc's JSON into dataclasses and ~0.5 s
parsing the ETRecord, which is more than the runs themselves took. The
delegation facts the ETRecord would add are recorded at export time instead.
The Inspector stays the oracle: the tests check that this reader gives the
same per-event durations as the Inspector on real ETDumps.

ETDump facts this module relies on (checked on executorch 1.5.1; tests/evidence/test_etdump_reader.py holds them):
- run_data[i] is one block: "Default" holds Program::load_method and
  Method::init, every "Execute" block is one Method::execute call.
- Events are recorded when they end, so children come before parents.
- Delegate (XNNPACK) operator events have no ``name`` but a
  ``delegate_debug_id_str`` such as "Convolution (NHWC, F32) IGEMM #1" and
  share the instruction_id of their DELEGATE_CALL.
- Portable kernels appear as ``native_call_<op>.<overload>`` inside an
  OPERATOR_CALL with the same instruction_id.
- Times are in ticks; the runtimes we use tick in nanoseconds.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from pytest_sme2.errors import EtdumpError
from pytest_sme2.system.regular_files import SESSION_FILE, RefusedFile, open_checked

RUN_MODEL = "Method::execute"
LOAD_METHOD = "Program::load_method"
INIT_METHOD = "Method::init"
DELEGATE_CALL = "DELEGATE_CALL"
OPERATOR_CALL = "OPERATOR_CALL"
EXECUTE_BLOCK = "Execute"
_STRUCTURAL = {RUN_MODEL, LOAD_METHOD, INIT_METHOD, DELEGATE_CALL, OPERATOR_CALL}
_FILE_IDENTIFIER = b"ED00"
NS_PER_MS = 1e6


@dataclass(frozen=True)
class RawEvent:
    """One ProfileEvent as stored (times in ticks)."""

    name: str | None
    instruction_id: int
    delegate_debug_id_int: int
    delegate_debug_id_str: str | None
    start: int
    end: int

    @property
    def label(self) -> str:
        """The name a person reads: the event name, or the delegate's debug string."""
        if self.name is not None:
            return self.name
        if self.delegate_debug_id_str is not None:
            return self.delegate_debug_id_str
        return f"delegate_op_{self.delegate_debug_id_int}"

    @property
    def is_delegate_op(self) -> bool:
        return self.name is None


@dataclass(frozen=True)
class RawBlock:
    name: str
    events: tuple[RawEvent, ...]


class _Buffer:
    """Vectorised, bounds-checked little-endian reads at many offsets at once.

    Flatbuffer scalars are aligned to their size relative to the buffer, but a
    size prefix added afterwards can shift that; reading through one numpy view
    per possible misalignment handles both without copying the file.
    """

    def __init__(self, data: bytes, path: Path):
        self.data = data
        self.size = len(data)
        self.path = path
        self._views: dict[tuple[str, int], np.ndarray] = {}

    def corrupt(self, what: str) -> EtdumpError:
        return EtdumpError(
            f"ETDump {self.path} is corrupt or truncated ({what}, file is {self.size} bytes); "
            "re-run the test to produce a new one, and check that the runner exited cleanly"
        )

    def _view(self, dtype: str, shift: int) -> np.ndarray:
        key = (dtype, shift)
        if key not in self._views:
            width = np.dtype(dtype).itemsize
            count = max(0, (self.size - shift) // width)
            self._views[key] = np.frombuffer(self.data, dtype=dtype, count=count, offset=shift)
        return self._views[key]

    def read(self, pos: np.ndarray, dtype: str, what: str) -> np.ndarray:
        width = np.dtype(dtype).itemsize
        pos = np.asarray(pos, dtype=np.int64)
        if pos.size == 0:
            return np.zeros(0, dtype=dtype)
        if pos.min() < 0 or pos.max() + width > self.size:
            raise self.corrupt(f"{what} points outside the file")
        shifts = pos % width
        first = int(shifts[0])
        if (shifts == first).all():  # the usual case: every value has the same alignment
            return self._view(dtype, first)[(pos - first) // width]
        out = np.empty(pos.shape, dtype=dtype)
        for shift in range(width):
            mask = shifts == shift
            if mask.any():
                out[mask] = self._view(dtype, shift)[(pos[mask] - shift) // width]
        return out

    def fields(self, tables: np.ndarray, index: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        """Positions of field ``index`` in each table, and which tables have it."""
        vtables = tables - self.read(tables, "<i4", f"{what} table").astype(np.int64)
        vt_size = self.read(vtables, "<u2", f"{what} vtable").astype(np.int64)
        slot = 4 + 2 * index
        has_slot = vt_size >= slot + 2
        offsets = np.zeros(tables.shape, dtype=np.int64)
        if has_slot.any():
            offsets[has_slot] = self.read(vtables[has_slot] + slot, "<u2", f"{what} vtable").astype(np.int64)
        present = offsets != 0
        return tables + offsets, present

    def refs(self, tables: np.ndarray, index: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        positions, present = self.fields(tables, index, what)
        targets = np.full(tables.shape, -1, dtype=np.int64)
        if present.any():
            targets[present] = positions[present] + self.read(positions[present], "<u4", what).astype(np.int64)
        return targets, present

    def scalars(self, tables: np.ndarray, index: int, dtype: str, default: int, what: str) -> np.ndarray:
        positions, present = self.fields(tables, index, what)
        values = np.full(tables.shape, default, dtype=np.int64)
        if present.any():
            values[present] = self.read(positions[present], dtype, what).astype(np.int64)
        return values

    def vectors(self, starts: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
        """Element table positions of offset vectors, and the owner index of each element."""
        lengths = self.read(starts, "<u4", f"{what} length").astype(np.int64)
        if (starts + 4 + 4 * lengths > self.size).any():
            raise self.corrupt(f"{what} runs past the end")
        owners = np.repeat(np.arange(starts.size), lengths)
        firsts = np.repeat(starts + 4 - 4 * np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        slots = firsts + 4 * np.arange(owners.size)
        return slots + self.read(slots, "<u4", what).astype(np.int64), owners

    def string_ids(self, starts: np.ndarray, present: np.ndarray, table: dict[bytes, int], what: str) -> np.ndarray:
        """Intern each present string into ``table``; -1 where absent. Decoding waits for unique ones."""
        ids = np.full(starts.size, -1, dtype=np.int64)
        if not present.any():
            return ids
        idx = np.flatnonzero(present)
        begins = starts[idx] + 4
        ends = begins + self.read(starts[idx], "<u4", f"{what} length").astype(np.int64)
        if (ends > self.size).any():
            raise self.corrupt(f"{what} runs past the end")
        data = self.data
        ids[idx] = np.fromiter(
            (table.setdefault(data[b:e], len(table)) for b, e in zip(begins.tolist(), ends.tolist())),
            np.int64,
            count=idx.size,
        )
        return ids


@dataclass
class _Columns:
    """Every ProfileEvent of a file as columns (one row per event)."""

    block_names: list[str]
    block: np.ndarray  # block index of each event
    labels: list[str]  # distinct labels: event names and delegate debug strings
    label_id: np.ndarray  # index into labels: the event name, else the delegate's debug string
    delegated: np.ndarray  # bool: a delegate-internal operator event (it has no name)
    has_delegate_str: np.ndarray
    instruction_id: np.ndarray
    delegate_id: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def ids_of(self, *names: str) -> list[int]:
        return [i for i, label in enumerate(self.labels) if label in names]


# Flatbuffers address with 32-bit signed offsets: no flatbuffer (so no ETDump) is larger than 2 GiB.
MAX_ETDUMP_BYTES = 2**31 - 1


def _read_checked(path: Path) -> bytes:
    """The file's bytes, read only after its first 12 bytes say ETDump and its size is one a flatbuffer
    can have: a 4 GB file of something else (or a device, a FIFO) is refused at once, naming the file,
    instead of being read whole first."""
    try:
        with open_checked(path, SESSION_FILE) as f:  # the one reader: a FIFO or device refused, never waited on
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise EtdumpError(f"{path} is not an ETDump: not a regular file (a folder, device or pipe)")
            if st.st_size == 0:
                raise EtdumpError(f"ETDump {path} is empty; the runner stopped before writing its trace (see its log)")
            head = f.read(12)
            if not (head[4:8] == _FILE_IDENTIFIER or head[8:12] == _FILE_IDENTIFIER):
                raise EtdumpError(
                    f"{path} is not an ETDump (no flatbuffer file identifier {_FILE_IDENTIFIER!r} in its first "
                    f"12 bytes: {head!r}); give the .etdp/.etdump file the runner wrote"
                )
            if st.st_size > MAX_ETDUMP_BYTES:
                raise EtdumpError(
                    f"ETDump {path} is {st.st_size} bytes, more than a flatbuffer can hold "
                    f"({MAX_ETDUMP_BYTES} bytes): not read; the file is damaged or not one ETDump"
                )
            if head[8:12] == _FILE_IDENTIFIER and len(head) == 12:
                declared = struct.unpack_from("<I", head, 0)[0] + 4
                if declared > st.st_size:
                    raise EtdumpError(
                        f"ETDump {path} is corrupt or truncated (header says {declared} bytes, file is "
                        f"{st.st_size} bytes); re-run the test to produce a new one, and check that the "
                        "runner exited cleanly"
                    )
            return head + f.read(MAX_ETDUMP_BYTES + 1 - len(head))
    except IsADirectoryError:
        raise EtdumpError(f"{path} is not an ETDump: it is a folder") from None
    except RefusedFile as refused:
        raise EtdumpError(f"{path} is not an ETDump: it {refused.reason} (a folder, device or pipe)") from None
    except OSError as exc:
        raise EtdumpError(f"ETDump {path} cannot be read: {exc.strerror or exc}") from None


def _columns(path: str | Path) -> _Columns:
    path = Path(path)
    if not path.exists():
        raise EtdumpError(
            f"ETDump {path} does not exist; check the path (for a run's ETDump: the runner did not "
            "write it, see the runner log beside it)"
        )
    data = _read_checked(path)
    if data[4:8] == _FILE_IDENTIFIER and data[8:12] != _FILE_IDENTIFIER:
        # Written by serialize_to_etdump_flatcc (Python) or flatcc without the runtime's 4-byte size prefix:
        # the same flatbuffer, read as if prefixed.
        data = struct.pack("<I", len(data)) + data
    buf = _Buffer(data, path)
    if len(data) < 12:
        raise buf.corrupt("shorter than a flatbuffer header")
    if data[8:12] != _FILE_IDENTIFIER:
        raise EtdumpError(f"{path} is not an ETDump (file identifier {data[8:12]!r}, expected {_FILE_IDENTIFIER!r})")
    size_prefix = struct.unpack_from("<I", data, 0)[0]
    if size_prefix + 4 > len(data):
        raise buf.corrupt(f"header says {size_prefix + 4} bytes")
    root = np.array([4 + struct.unpack_from("<I", data, 4)[0]], dtype=np.int64)
    run_vector, has_runs = buf.refs(root, 1, "run_data")
    runs, _ = buf.vectors(run_vector[has_runs], "run_data")
    block_table: dict[bytes, int] = {}
    block_ids = buf.string_ids(*buf.refs(runs, 0, "run name"), block_table, "run name")
    block_texts = [b.decode("utf-8", errors="replace") for b in block_table]
    event_vectors, has_events = buf.refs(runs, 3, "events")
    events, owner = buf.vectors(event_vectors[has_events], "events")
    block = np.flatnonzero(has_events)[owner]
    profile_events, is_profile = buf.refs(events, 0, "profile_event")
    pe, block = profile_events[is_profile], block[is_profile]
    table: dict[bytes, int] = {}
    name_id = buf.string_ids(*buf.refs(pe, 0, "event name"), table, "event name")
    delegate_str_id = buf.string_ids(*buf.refs(pe, 4, "delegate debug id"), table, "delegate debug id")
    delegate_id = buf.scalars(pe, 3, "<i4", -1, "delegate_debug_id_int")
    labels = [b.decode("utf-8", errors="replace") for b in table]
    label_id = np.where(name_id >= 0, name_id, delegate_str_id)
    for i in np.flatnonzero(label_id < 0).tolist():  # delegate events identified by integer only
        text = f"delegate_op_{int(delegate_id[i])}"
        if text not in labels:
            labels.append(text)
        label_id[i] = labels.index(text)
    return _Columns(
        block_names=[block_texts[i] if i >= 0 else "" for i in block_ids.tolist()],
        block=block,
        labels=labels,
        label_id=label_id,
        delegated=name_id < 0,
        has_delegate_str=delegate_str_id >= 0,
        instruction_id=buf.scalars(pe, 2, "<i4", -1, "instruction_id"),
        delegate_id=delegate_id,
        start=buf.scalars(pe, 6, "<u8", 0, "start_time"),
        end=buf.scalars(pe, 7, "<u8", 0, "end_time"),
    )


def read_blocks(path: str | Path) -> list[RawBlock]:
    """Parse an ETDump file into its run blocks (for inspection; traces use columns)."""
    cols = _columns(path)
    per_block: list[list[RawEvent]] = [[] for _ in cols.block_names]
    for i, b in enumerate(cols.block.tolist()):
        label = cols.labels[int(cols.label_id[i])]
        delegated = bool(cols.delegated[i])
        per_block[b].append(
            RawEvent(
                None if delegated else label,
                int(cols.instruction_id[i]),
                int(cols.delegate_id[i]),
                label if delegated and cols.has_delegate_str[i] else None,
                int(cols.start[i]),
                int(cols.end[i]),
            )
        )
    return [RawBlock(name, tuple(events)) for name, events in zip(cols.block_names, per_block)]


@dataclass(frozen=True)
class ExecuteEvents:
    """Every event of the Execute blocks (one block a run), in file order, as columns: what the kit-layout CSVs
    are written from without one Python object per event (a 150,000-run session held 2.2 GB that way)."""

    labels: list[str]  # distinct labels: event names, delegates' debug strings, ``delegate_op_N``
    run: np.ndarray  # the run (the Execute block's ordinal) of each event
    label_id: np.ndarray  # index into labels
    delegated: np.ndarray  # bool: a delegate-internal operator event
    start: np.ndarray  # ticks
    end: np.ndarray

    @property
    def runs(self) -> int:
        return int(self.run[-1]) + 1 if self.run.size else 0


def execute_events(path: str | Path) -> ExecuteEvents:
    """The Execute blocks' events of an ETDump as columns (see ExecuteEvents)."""
    cols = _columns(path)
    execute = np.flatnonzero(np.asarray(cols.block_names, dtype=object) == EXECUTE_BLOCK)
    hits = np.flatnonzero(np.isin(cols.block, execute))
    return ExecuteEvents(
        labels=cols.labels,
        run=np.searchsorted(execute, cols.block[hits]),
        label_id=cols.label_id[hits],
        delegated=cols.delegated[hits],
        start=cols.start[hits],
        end=cols.end[hits],
    )


@dataclass(frozen=True)
class OpKey:
    """Identity of one operator instance across runs."""

    name: str
    instruction_id: int
    delegated: bool
    occurrence: int = 0  # >0 only if the same name repeats within one instruction


def op_id(key: OpKey) -> str:
    """A readable, stable name of one operator instance: its event name, ``@`` its instruction, and
    ``.N`` for the N-th repeat within that instruction (event names alone repeat: each delegate
    partition numbers its operators from #1)."""
    return f"{key.name} @{key.instruction_id}" + (f".{key.occurrence}" if key.occurrence else "")


@dataclass(frozen=True)
class EventSpans:
    """When each event of the runs began and ended, in the ETDump's ticks (not durations).

    What places a sampling profiler's samples inside operators (kernel_sampling.py).
    XNNPACK's delegate operator events are written back to back from the start of
    the delegate call with XNNPACK's own per-operator times (microseconds), so their
    positions are as good as those times, not exact.
    """

    op: np.ndarray  # per operator event: index into ExecutionTrace.ops
    op_run: np.ndarray
    op_delegated: np.ndarray  # bool
    op_start: np.ndarray  # int64 ticks
    op_end: np.ndarray
    delegate_start: np.ndarray  # DELEGATE_CALL events
    delegate_end: np.ndarray
    execute_start: np.ndarray  # Method::execute, one per run
    execute_end: np.ndarray
    # Program::load_method and Method::init of the same process (its warmup file's Default block), or None.
    load: tuple[int, int] | None = None
    init: tuple[int, int] | None = None

    def remapped(self, rows: np.ndarray, run_offset: int) -> "EventSpans":
        """The same spans with operator indices mapped through ``rows`` and runs moved by ``run_offset``:
        one process's part of a merged trace (ExecutionTrace.concat)."""
        return replace(self, op=rows[self.op] if self.op.size else self.op, op_run=self.op_run + run_offset)


@dataclass
class ExecutionTrace:
    """What the ETDump(s) of one run of a program say, in ``unit``.

    Milliseconds from the runner's clock, or instructions counted under emulation (the same events with
    each duration replaced by a count: qemu_counts.py): the field names carry no unit so that a count is
    never read as a time.
    """

    execute_values: np.ndarray  # (runs,) Method::execute
    delegate_values: np.ndarray  # (runs,) inside DELEGATE_CALL events
    ops: list[OpKey]
    op_values: np.ndarray  # (len(ops), runs); 0 where an op did not run in a run
    load_value: float | None = None
    init_value: float | None = None
    unit: str = "ms"
    sources: list[str] = field(default_factory=list)
    # Per op: (index of the file in ``sources``, index of the event in that file) of its first appearance.
    op_events: np.ndarray | None = None
    # When each event happened (None for merged traces, and for counts read without the positions they were
    # counted at).
    spans: EventSpans | None = None
    # The spans of each runner process whose runs this trace holds, in run order (one for a trace read from one
    # process's files, several after concat; empty where positions are unknown): what the timeline draws, each
    # process on its own clock.
    span_parts: tuple[EventSpans, ...] = ()
    # Every Program::load_method and Method::init of each runner process, in order (a runner given
    # --startup_repeats loads the method several times), as (load values, init values) in ``unit``; one entry
    # per process like ``span_parts``, empty where unknown. What the gate judges start-up on (startup_verdicts).
    startup_parts: tuple[tuple[np.ndarray, np.ndarray], ...] = ()

    @property
    def runs(self) -> int:
        return int(self.execute_values.shape[0])

    @classmethod
    def concat(cls, traces: "list[ExecutionTrace]") -> "ExecutionTrace":
        """The runs of several traces of the same program as one trace (e.g. chunks from alternated processes).

        Operator instances are matched by identity (name, instruction, delegated,
        occurrence); an op missing from a chunk counts 0 ms there, as within one
        trace. Load and init come from the first trace that has them.
        """
        if not traces:
            raise ValueError("ExecutionTrace.concat needs at least one trace")
        if len({t.unit for t in traces}) > 1:
            raise ValueError(f"ExecutionTrace.concat: traces in different units {sorted({t.unit for t in traces})}")
        ops: list[OpKey] = []
        index: dict[OpKey, int] = {}
        for trace in traces:
            for key in trace.ops:
                if key not in index:
                    index[key] = len(ops)
                    ops.append(key)
        total_runs = sum(t.runs for t in traces)
        op_values = np.zeros((len(ops), total_runs))
        parts: list[EventSpans] = []
        start = 0
        for trace in traces:
            rows = np.array([index[key] for key in trace.ops], dtype=np.int64)
            if trace.ops:
                op_values[rows, start : start + trace.runs] = trace.op_values
            parts.extend(part.remapped(rows, start) for part in trace.span_parts)
            start += trace.runs
        first = lambda name: next((getattr(t, name) for t in traces if getattr(t, name) is not None), None)  # noqa: E731
        return cls(
            execute_values=np.concatenate([t.execute_values for t in traces]),
            delegate_values=np.concatenate([t.delegate_values for t in traces]),
            ops=ops,
            op_values=op_values,
            load_value=first("load_value"),
            init_value=first("init_value"),
            sources=[s for t in traces for s in t.sources],
            unit=traces[0].unit,
            span_parts=tuple(parts) if all(t.span_parts for t in traces) else (),
            startup_parts=tuple(p for t in traces for p in t.startup_parts)
            if all(t.startup_parts for t in traces)
            else (),
        )


def _startup_events(cols: _Columns, before_runs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Indices of every Program::load_method and of every Method::init event outside the runs (the "Default"
    blocks), in file order; ``before_runs``: only those before the file's first run (the method the runs used:
    a runner given --startup_repeats loads it again after its runs)."""
    is_execute = np.array([n == EXECUTE_BLOCK for n in cols.block_names], dtype=bool)
    outside_runs = ~is_execute
    if before_runs and is_execute.any():
        outside_runs &= np.arange(is_execute.size) < int(np.argmax(is_execute))
    load, init = (
        np.flatnonzero(np.isin(cols.label_id, cols.ids_of(name)) & outside_runs[cols.block])
        for name in (LOAD_METHOD, INIT_METHOD)
    )
    return load, init


def _load_init_spans(cols: _Columns) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """Where the first Program::load_method and Method::init before the runs began and ended: the method the
    runs used. A timed file whose process wrote its first load to the warmup file has none."""
    load, init = (
        (int(cols.start[hits[0]]), int(cols.end[hits[0]])) if hits.size else None
        for hits in _startup_events(cols, before_runs=True)
    )
    return load, init


def _startup_values(cols: _Columns, ticks_per_ms: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Every Program::load_method and Method::init outside the runs, in file order, or None when the file has
    neither or not as many of one as of the other (each load of a method inits it once)."""
    load, init = ((cols.end[hits] - cols.start[hits]).astype(float) / ticks_per_ms for hits in _startup_events(cols))
    if not load.size or load.size != init.size:
        return None
    return load, init


def _span_value(span: tuple[int, int], ticks_per_ms: float) -> float:
    return float(span[1] - span[0]) / ticks_per_ms


def event_kinds(path: str | Path) -> np.ndarray:
    """Per ProfileEvent of a file, in file order: True for a delegate-internal operator event.

    ETDumpGen appends events as they end, so file order is the order of its
    end_profiling and log_profiling_delegate calls (qemu_counts.py relies on it).
    """
    return _columns(path).delegated.copy()


def _with_values(
    cols: _Columns, values: np.ndarray | None, path: str | Path, starts: np.ndarray | None = None
) -> _Columns:
    """The columns with each event's duration replaced by ``values`` (one per event, in file order), each event
    beginning at its entry of ``starts`` (the same events' positions in that unit) or, without them, at 0."""
    if values is None:
        return cols
    values = np.asarray(values, dtype=np.int64)
    if values.shape != cols.start.shape:
        raise EtdumpError(f"ETDump {path} has {cols.start.size} events but {values.size} values were given for them")
    begin = np.zeros_like(values) if starts is None else np.asarray(starts, dtype=np.int64)
    if begin.shape != values.shape:
        raise EtdumpError(f"ETDump {path} has {cols.start.size} events but {begin.size} positions were given for them")
    return replace(cols, start=begin, end=begin + values)


_EVENT_FIELDS = ("lid", "run", "ms", "instr", "delegated", "event", "start", "end")


@dataclass(frozen=True)
class _RunEvents:
    """Every event inside the runs of a trace's files, one entry per event in file order, labels numbered across
    the files (``label_ids``), with the first load and init spans and start-up values the files hold: what
    read_trace sums into runs and operators."""

    lid: np.ndarray
    run: np.ndarray  # the run it belongs to, counted across the files
    ms: np.ndarray  # its duration (or value) in the trace's unit
    instr: np.ndarray
    delegated: np.ndarray
    event: np.ndarray  # (index of its file, index of the event in that file)
    start: np.ndarray
    end: np.ndarray
    label_ids: dict[str, int]
    runs: int
    load_span: tuple[int, int] | None
    init_span: tuple[int, int] | None
    startup: tuple[np.ndarray, np.ndarray] | None

    def total(self, name: str) -> np.ndarray:
        """Per run, the summed amount of the events labelled ``name``."""
        mask = self.labelled(name)
        return np.bincount(self.run[mask], weights=self.ms[mask], minlength=self.runs)

    def labelled(self, name: str) -> np.ndarray:
        """Which events are labelled ``name``."""
        return self.lid == self.label_ids.get(name, -1)


def _file_run_events(
    cols: _Columns, path: str | Path, index: int, label_ids: dict[str, int], runs_before: int, ticks_per_ms: float
) -> tuple[dict[str, np.ndarray], int]:
    """One file's events inside its Execute blocks, by _EVENT_FIELDS (its labels numbered into ``label_ids``, its
    runs after ``runs_before``), and how many runs it holds; an EtdumpError when a run has no Method::execute."""
    is_execute_block = np.array([n == EXECUTE_BLOCK for n in cols.block_names], dtype=bool)
    in_run = is_execute_block[cols.block] if cols.block.size else np.zeros(0, bool)
    to_global = np.array([label_ids.setdefault(label, len(label_ids)) for label in cols.labels], dtype=np.int64)
    lid = to_global[cols.label_id] if cols.label_id.size else np.zeros(0, np.int64)
    run = (np.cumsum(is_execute_block) - 1)[cols.block] if cols.block.size else np.zeros(0, np.int64)
    runs = int(is_execute_block.sum())
    execute_id = label_ids.get(RUN_MODEL, -1)
    has_execute = np.zeros(runs, dtype=bool)
    has_execute[run[in_run & (lid == execute_id)]] = True
    if not has_execute.all():
        raise EtdumpError(
            f"ETDump {path}: an Execute block has no {RUN_MODEL} event; the runtime was built "
            "without event tracing or the file is not a complete run"
        )
    events = {
        "lid": lid[in_run],
        "run": run[in_run] + runs_before,
        "ms": (cols.end - cols.start)[in_run].astype(np.float64) / ticks_per_ms,
        "instr": cols.instruction_id[in_run],
        "delegated": cols.delegated[in_run],
        "event": np.stack([np.full(int(in_run.sum()), index), np.flatnonzero(in_run)], axis=1),
        "start": cols.start[in_run].astype(np.int64),
        "end": cols.end[in_run].astype(np.int64),
    }
    return events, runs


def _read_run_events(
    paths: Sequence[str | Path],
    ticks_per_ms: float,
    values: Sequence[np.ndarray | None] | None,
    starts: Sequence[np.ndarray | None] | None,
) -> _RunEvents:
    """The run events of every file, in order (read_trace's arguments); an EtdumpError when they hold no run."""
    load_span: tuple[int, int] | None = None  # the first file's that has one (Program::load_method)
    init_span: tuple[int, int] | None = None
    startup: tuple[np.ndarray, np.ndarray] | None = None
    label_ids: dict[str, int] = {}
    parts: dict[str, list] = {name: [] for name in _EVENT_FIELDS}
    runs_total = 0
    if values is not None and len(values) != len(paths):
        raise ValueError(f"read_trace: {len(values)} value arrays for {len(paths)} files")
    for index, path in enumerate(paths):
        cols = _with_values(
            _columns(path), None if values is None else values[index], path, None if starts is None else starts[index]
        )
        load, init = _load_init_spans(cols)
        load_span, init_span = load_span or load, init_span or init
        startup = startup or _startup_values(cols, ticks_per_ms)
        events, runs = _file_run_events(cols, path, index, label_ids, runs_total, ticks_per_ms)
        for name in _EVENT_FIELDS:
            parts[name].append(events[name])
        runs_total += runs
    if runs_total == 0:
        raise EtdumpError(
            f"ETDump {', '.join(map(str, paths))} holds no Execute runs; the runner loaded the "
            "program but never executed it (runs < 1?) or the trace was written too early"
        )
    arrays = {name: np.concatenate(parts[name]) for name in _EVENT_FIELDS}
    return _RunEvents(
        **arrays,
        label_ids=label_ids,
        runs=runs_total,
        load_span=load_span,
        init_span=init_span,
        startup=startup,
    )


def _operator_mask(events: _RunEvents) -> np.ndarray:
    """Which events are operators: every non-structural one, and an OPERATOR_CALL with no operator of its own
    (relabelled in ``events`` after its instruction)."""
    lid, run, instr, label_ids = events.lid, events.run, events.instr, events.label_ids
    structural = np.isin(lid, [label_ids[n] for n in _STRUCTURAL if n in label_ids])
    is_op = ~structural
    # A kernel built without its own profiling scope shows only as OPERATOR_CALL;
    # keep its time as an op named after its instruction rather than lose it to OTHER.
    place = run * (1 << 32) + instr
    orphan = (lid == label_ids.get(OPERATOR_CALL, -1)) & ~np.isin(place, place[is_op & ~events.delegated])
    for i in np.flatnonzero(orphan).tolist():
        lid[i] = label_ids.setdefault(f"{OPERATOR_CALL}[{int(instr[i])}]", len(label_ids))
    return is_op | orphan


@dataclass(frozen=True)
class _OpInstances:
    """The operator instances of a trace, in order of first appearance, and where each operator event went."""

    ops: list[OpKey]
    values: np.ndarray  # (len(ops), runs)
    index: np.ndarray  # per operator event: its instance in ``ops``
    first_events: np.ndarray  # per instance: (file, event) of its first appearance


def _op_instances(events: _RunEvents, is_op: np.ndarray) -> _OpInstances:
    """Operator events grouped into instances by identity (label, instruction, delegated, occurrence within its
    run), their amounts summed per run."""
    names = list(events.label_ids)
    op_lid, op_run, op_instr = events.lid[is_op], events.run[is_op], events.instr[is_op]
    op_del, op_amounts = events.delegated[is_op], events.ms[is_op]
    base = (op_lid << 33) + ((op_instr + 1) << 1) + op_del.astype(np.int64)
    order = np.lexsort((np.arange(base.size), base, op_run))
    sorted_base, sorted_run = base[order], op_run[order]
    new_group = np.ones(base.size, dtype=bool)
    new_group[1:] = (sorted_base[1:] != sorted_base[:-1]) | (sorted_run[1:] != sorted_run[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(base.size), 0))
    occurrence = np.empty(base.size, dtype=np.int64)
    occurrence[order] = np.arange(base.size) - group_start
    if op_lid.size and op_lid.max() < (1 << 16) and occurrence.max() < (1 << 10) and (op_instr < (1 << 30)).all():
        keys = (base << 10) + occurrence  # one int64 per identity: much faster to unique than rows
    else:
        keys = np.stack([base, occurrence], axis=1)
    unique, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first, kind="stable")
    rank = np.empty(unique.shape[0], dtype=np.int64)
    rank[by_appearance] = np.arange(unique.shape[0])
    op_index = rank[inverse.ravel()]
    op_values = np.zeros((unique.shape[0], events.runs))
    np.add.at(op_values, (op_index, op_run), op_amounts)
    ops = [
        OpKey(names[int(op_lid[i])], int(op_instr[i]), bool(op_del[i]), int(occurrence[i]))
        for i in first[by_appearance].tolist()
    ]
    return _OpInstances(ops, op_values, op_index, events.event[is_op][first[by_appearance]].reshape(-1, 2))


def _event_spans(events: _RunEvents, is_op: np.ndarray, instances: _OpInstances) -> EventSpans:
    """Where each operator, delegate call and run began and ended, with the load and init spans."""
    start, end = events.start, events.end
    delegate, execute = events.labelled(DELEGATE_CALL), events.labelled(RUN_MODEL)
    return EventSpans(
        op=instances.index,
        op_run=events.run[is_op],
        op_delegated=events.delegated[is_op],
        op_start=start[is_op],
        op_end=end[is_op],
        delegate_start=start[delegate],
        delegate_end=end[delegate],
        execute_start=start[execute],
        execute_end=end[execute],
        load=events.load_span,
        init=events.init_span,
    )


def read_trace(
    *paths: str | Path,
    ticks_per_ms: float = NS_PER_MS,
    values: Sequence[np.ndarray | None] | None = None,
    unit: str = "ms",
    starts: Sequence[np.ndarray | None] | None = None,
) -> ExecutionTrace:
    """Every Execute block of the given files, in order, as runs.

    Load/init time comes from any "Default" block. Use :func:`read_run` when a
    runner wrote its warmup runs to a separate file. ``values`` (one array per
    file, one value per event in file order) replaces each event's duration:
    the same events measured in another unit, e.g. instructions counted under
    emulation (then ``ticks_per_ms=1`` keeps the values as they are, and ``unit`` names them). ``starts``
    (likewise per file) gives where each such event began in that unit; with it the trace keeps its spans.
    """
    events = _read_run_events(paths, ticks_per_ms, values, starts)
    execute_values, delegate_values = events.total(RUN_MODEL), events.total(DELEGATE_CALL)
    is_op = _operator_mask(events)
    instances = _op_instances(events, is_op)
    spans = None
    if values is None or (starts is not None and all(s is not None for s in starts)):
        spans = _event_spans(events, is_op, instances)
    load_span, init_span, startup = events.load_span, events.init_span, events.startup
    return ExecutionTrace(
        execute_values=execute_values,
        delegate_values=delegate_values,
        ops=instances.ops,
        op_values=instances.values,
        load_value=None if load_span is None else _span_value(load_span, ticks_per_ms),
        init_value=None if init_span is None else _span_value(init_span, ticks_per_ms),
        sources=[str(p) for p in paths],
        op_events=instances.first_events,
        spans=spans,
        span_parts=(spans,) if spans is not None and len(paths) == 1 else (),
        startup_parts=(startup,) if startup is not None and len(paths) == 1 else (),
        unit=unit,
    )


def read_run(
    timed: str | Path,
    warmup: str | Path | None = None,
    *,
    ticks_per_ms: float = NS_PER_MS,
    values: tuple[np.ndarray, np.ndarray | None] | None = None,
    unit: str = "ms",
    starts: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> ExecutionTrace:
    """Trace of the timed runs; load/init come from the warmup file when the runner split them.

    ``values``: (timed file's, warmup file's) per-event values replacing durations (see read_trace), and
    ``starts`` where those events began (the files of one process share one axis).
    """
    trace = read_trace(
        timed,
        ticks_per_ms=ticks_per_ms,
        values=None if values is None else [values[0]],
        unit=unit,
        starts=None if starts is None else [starts[0]],
    )
    if warmup is None:
        return trace
    cols = _with_values(
        _columns(warmup), None if values is None else values[1], warmup, None if starts is None else starts[1]
    )
    load, init = _load_init_spans(cols)
    trace.sources.append(str(warmup))
    if load is None and init is None:
        return trace
    # The warmup file holds the process's first load (the runs' method); the timed one only the runner's
    # repeated loads after the runs (--startup_repeats), which follow it in the process's start-up samples.
    trace.load_value = None if load is None else _span_value(load, ticks_per_ms)
    trace.init_value = None if init is None else _span_value(init, ticks_per_ms)
    first, repeats = _startup_values(cols, ticks_per_ms), trace.startup_parts
    if first is not None:
        trace.startup_parts = (
            ((np.concatenate([first[0], repeats[0][0]]), np.concatenate([first[1], repeats[0][1]])),)
            if repeats
            else (first,)
        )
    if trace.spans is not None:  # the warmup file is the same process's: one axis
        trace.spans = replace(trace.spans, load=load, init=init)
        trace.span_parts = (trace.spans,)
    return trace


# ---------------------------------------------------------------------------
