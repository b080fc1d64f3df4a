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

ETDump facts this module relies on (FACTS.md, checked on executorch 1.5.1):
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

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import EtdumpError

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


class _Reader:
    """Minimal bounds-checked flatbuffer table reader for the ETDump schema."""

    def __init__(self, buf: bytes, path: Path):
        self.buf = buf
        self.path = path

    def _fail(self, what: str) -> EtdumpError:
        return EtdumpError(
            f"ETDump {self.path} is corrupt or truncated ({what}, file is {len(self.buf)} bytes); "
            "re-run the test to produce a new one, and check that the runner exited cleanly"
        )

    def u32(self, pos: int) -> int:
        if pos < 0 or pos + 4 > len(self.buf):
            raise self._fail(f"offset {pos} out of range")
        return struct.unpack_from("<I", self.buf, pos)[0]

    def field_pos(self, table: int, index: int) -> int | None:
        vtable = table - struct.unpack_from("<i", self.buf, table)[0] if 0 <= table <= len(self.buf) - 4 else -1
        if vtable < 0 or vtable + 4 > len(self.buf):
            raise self._fail(f"bad vtable for table at {table}")
        vt_size = struct.unpack_from("<H", self.buf, vtable)[0]
        slot = 4 + 2 * index
        if slot + 2 > vt_size:
            return None
        off = struct.unpack_from("<H", self.buf, vtable + slot)[0]
        return table + off if off else None

    def scalar(self, table: int, index: int, fmt: str, default: int) -> int:
        pos = self.field_pos(table, index)
        if pos is None:
            return default
        if pos + struct.calcsize(fmt) > len(self.buf):
            raise self._fail(f"scalar at {pos} out of range")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def ref(self, table: int, index: int) -> int | None:
        pos = self.field_pos(table, index)
        return None if pos is None else pos + self.u32(pos)

    def string(self, table: int, index: int) -> str | None:
        pos = self.ref(table, index)
        if pos is None:
            return None
        length = self.u32(pos)
        if pos + 4 + length > len(self.buf):
            raise self._fail(f"string at {pos} runs past the end")
        return self.buf[pos + 4 : pos + 4 + length].decode("utf-8", errors="replace")

    def vector(self, table: int, index: int) -> list[int]:
        pos = self.ref(table, index)
        if pos is None:
            return []
        length = self.u32(pos)
        if pos + 4 + 4 * length > len(self.buf):
            raise self._fail(f"vector at {pos} runs past the end")
        return [pos + 4 + 4 * i + self.u32(pos + 4 + 4 * i) for i in range(length)]


def read_blocks(path: str | Path) -> list[RawBlock]:
    """Parse an ETDump file into its run blocks, validating it on the way."""
    path = Path(path)
    if not path.exists():
        raise EtdumpError(f"ETDump {path} does not exist; the runner did not write it (see the runner log beside it)")
    buf = path.read_bytes()
    if not buf:
        raise EtdumpError(f"ETDump {path} is empty; the runner stopped before writing its trace (see its log)")
    reader = _Reader(buf, path)
    if len(buf) < 12:
        raise reader._fail("shorter than a flatbuffer header")
    size_prefix = struct.unpack_from("<I", buf, 0)[0]
    if buf[8:12] != _FILE_IDENTIFIER:
        raise EtdumpError(
            f"{path} is not an ETDump (file identifier {buf[8:12]!r}, expected {_FILE_IDENTIFIER!r}); "
            "pass the .etdp file the runner wrote, not a .pte or ETRecord"
        )
    if size_prefix + 4 > len(buf):
        raise reader._fail(f"header says {size_prefix + 4} bytes")
    try:
        root = 4 + reader.u32(4)
        blocks = []
        for run in reader.vector(root, 1):
            events = []
            for event in reader.vector(run, 3):
                pe = reader.ref(event, 0)
                if pe is None:
                    continue  # allocation or debug events carry no time
                events.append(
                    RawEvent(
                        name=reader.string(pe, 0),
                        instruction_id=reader.scalar(pe, 2, "<i", -1),
                        delegate_debug_id_int=reader.scalar(pe, 3, "<i", -1),
                        delegate_debug_id_str=reader.string(pe, 4),
                        start=reader.scalar(pe, 6, "<Q", 0),
                        end=reader.scalar(pe, 7, "<Q", 0),
                    )
                )
            blocks.append(RawBlock(reader.string(run, 0) or "", tuple(events)))
    except struct.error as exc:
        raise reader._fail(str(exc)) from None
    return blocks


@dataclass(frozen=True)
class OpKey:
    """Identity of one operator instance across runs."""

    name: str
    instruction_id: int
    delegated: bool
    occurrence: int = 0  # >0 only if the same name repeats within one instruction


@dataclass
class ExecutionTrace:
    """What the ETDump(s) of one run of a program say, in milliseconds."""

    execute_ms: np.ndarray  # (runs,)
    delegate_ms: np.ndarray  # (runs,) time inside DELEGATE_CALL events
    ops: list[OpKey]
    op_ms: np.ndarray  # (len(ops), runs); 0 where an op did not run in a run
    load_ms: float | None = None
    init_ms: float | None = None
    sources: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return int(self.execute_ms.shape[0])


def _ms(event: RawEvent, ticks_per_ms: float) -> float:
    return (event.end - event.start) / ticks_per_ms


def read_trace(*paths: str | Path, ticks_per_ms: float = NS_PER_MS) -> ExecutionTrace:
    """Every Execute block of the given files, in order, as runs.

    Load/init time comes from any "Default" block. Use :func:`read_run` when a
    runner wrote its warmup runs to a separate file.
    """
    load_ms = init_ms = None
    execute: list[float] = []
    delegate: list[float] = []
    per_run_ops: list[dict[OpKey, float]] = []
    order: dict[OpKey, None] = {}
    for path in paths:
        for block in read_blocks(path):
            if block.name != EXECUTE_BLOCK:
                for ev in block.events:
                    if ev.name == LOAD_METHOD:
                        load_ms = _ms(ev, ticks_per_ms)
                    elif ev.name == INIT_METHOD:
                        init_ms = _ms(ev, ticks_per_ms)
                continue
            run_execute = 0.0
            run_delegate = 0.0
            found_execute = False
            ops: dict[OpKey, float] = {}
            has_kernel_event: set[int] = set()
            operator_calls: dict[int, float] = {}
            for ev in block.events:
                label = ev.label
                if label == RUN_MODEL:
                    run_execute += _ms(ev, ticks_per_ms)
                    found_execute = True
                elif label == DELEGATE_CALL:
                    run_delegate += _ms(ev, ticks_per_ms)
                elif label == OPERATOR_CALL:
                    operator_calls[ev.instruction_id] = operator_calls.get(ev.instruction_id, 0.0) + _ms(
                        ev, ticks_per_ms
                    )
                elif label not in _STRUCTURAL:
                    key = OpKey(label, ev.instruction_id, ev.is_delegate_op)
                    while key in ops:
                        key = OpKey(key.name, key.instruction_id, key.delegated, key.occurrence + 1)
                    ops[key] = _ms(ev, ticks_per_ms)
                    if not ev.is_delegate_op:
                        has_kernel_event.add(ev.instruction_id)
            # A kernel that was built without its own profiling scope shows only
            # as OPERATOR_CALL; keep its time rather than lose it to OTHER.
            for instr, ms in operator_calls.items():
                if instr not in has_kernel_event:
                    ops[OpKey(f"{OPERATOR_CALL}[{instr}]", instr, False)] = ms
            if not found_execute:
                raise EtdumpError(
                    f"ETDump {path}: an Execute block has no {RUN_MODEL} event; the runtime was built "
                    "without event tracing or the file is not a complete run"
                )
            execute.append(run_execute)
            delegate.append(run_delegate)
            per_run_ops.append(ops)
            order.update(dict.fromkeys(ops))
    if not execute:
        raise EtdumpError(
            f"ETDump {', '.join(map(str, paths))} holds no Execute runs; the runner loaded the "
            "program but never executed it (runs < 1?) or the trace was written too early"
        )
    keys = list(order)
    index = {k: i for i, k in enumerate(keys)}
    op_ms = np.zeros((len(keys), len(execute)))
    for run, ops in enumerate(per_run_ops):
        for key, ms in ops.items():
            op_ms[index[key], run] = ms
    return ExecutionTrace(
        execute_ms=np.asarray(execute),
        delegate_ms=np.asarray(delegate),
        ops=keys,
        op_ms=op_ms,
        load_ms=load_ms,
        init_ms=init_ms,
        sources=[str(p) for p in paths],
    )


def read_run(timed: str | Path, warmup: str | Path | None = None, *, ticks_per_ms: float = NS_PER_MS) -> ExecutionTrace:
    """Trace of the timed runs; load/init come from the warmup file when the runner split them."""
    trace = read_trace(timed, ticks_per_ms=ticks_per_ms)
    if warmup is not None and Path(warmup).exists() and trace.load_ms is None:
        for block in read_blocks(warmup):
            if block.name == EXECUTE_BLOCK:
                continue
            for ev in block.events:
                if ev.name == LOAD_METHOD:
                    trace.load_ms = _ms(ev, ticks_per_ms)
                elif ev.name == INIT_METHOD:
                    trace.init_ms = _ms(ev, ticks_per_ms)
        trace.sources.append(str(warmup))
    return trace


# ---------------------------------------------------------------------------
# Synthetic ETDumps, written with ExecuTorch's own schema and serializer, so
# tests and benchmarks know every event time exactly.


@dataclass(frozen=True)
class SyntheticEvent:
    """An event to write: a runtime event (name) or a delegate op (delegate_name)."""

    start_ns: int
    end_ns: int
    name: str | None = None
    delegate_name: str | None = None
    instruction_id: int = -1


def write_synthetic_etdump(path: str | Path, blocks: list[tuple[str, list[SyntheticEvent]]]) -> Path:
    """Serialise blocks of events with executorch.devtools.etdump's schema and flatcc."""
    from executorch.devtools.etdump import schema_flatcc as s
    from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc

    run_data = []
    for block_name, events in blocks:
        run_data.append(
            s.RunData(
                name=block_name,
                bundled_input_index=-1,
                allocators=[],
                events=[
                    s.Event(
                        profile_event=s.ProfileEvent(
                            name=ev.name,
                            chain_index=0,
                            instruction_id=ev.instruction_id,
                            delegate_debug_id_int=-1,
                            delegate_debug_id_str=ev.delegate_name,
                            delegate_debug_metadata=None,
                            start_time=ev.start_ns,
                            end_time=ev.end_ns,
                        ),
                        allocation_event=None,
                        debug_event=None,
                    )
                    for ev in events
                ],
            )
        )
    data = serialize_to_etdump_flatcc(s.ETDumpFlatCC(version=0, run_data=run_data))
    path = Path(path)
    # The runtime writes size-prefixed ETDumps; so do we, so readers see one layout.
    path.write_bytes(struct.pack("<I", len(data)) + data)
    return path
