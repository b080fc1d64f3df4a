"""Arithmetic work and bytes moved per operator, from the exported program alone.

Time depends on the machine; an operator's multiply-accumulates and bytes do not. They turn times into
throughput on hardware and give the emulated target its SME path share *by work*. Where the numbers come
from (XNNPACK delegate graphs matched per kind in order, portable kernels' tensor arguments):
docs/history.md, "How export/work.py counts work".
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pytest_sme2.errors import ProgramError
from pytest_sme2.evidence.categories import classify
from pytest_sme2.evidence.identity import NO_HANDLE, graph_anchors
from pytest_sme2.system.regular_files import EXPORT_RECORD, PROGRAM, RefusedFile, read_bytes
from pytest_sme2.system.safe_files import write_file

_XNN_BYTES = {
    "xnn_datatype_fp32": 4,
    "xnn_datatype_fp16": 2,
    "xnn_datatype_qint8": 1,
    "xnn_datatype_quint8": 1,
    "xnn_datatype_qint32": 4,
    "xnn_datatype_qcint8": 1,
    "xnn_datatype_qcint32": 4,
    "xnn_datatype_qcint4": 0.5,
    "xnn_datatype_qdint8": 1,
    "xnn_datatype_qbint4": 0.5,
    "xnn_datatype_qpint8": 1,
    "xnn_datatype_int32": 4,
    "xnn_datatype_pfp32": 4,
    "xnn_datatype_bf16": 2,
}
# ExecuTorch ScalarType codes -> bytes per element
_ET_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 15: 2}
# Runtime operator kinds (categories.classify(...).kind) and the XNode types they come from, per matching group.
_GROUPS = {
    "matmul": (
        {"Convolution", "Fully Connected", "Deconvolution"},
        {"XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected", "XNNConvTranspose2d"},
    ),
    "bmm": ({"Batch Matrix Multiply"}, {"XNNBatchMatrixMultiply"}),
    "transpose": ({"Transpose"}, {"XNNStaticTranspose"}),
    "reshape": ({"Static Reshape", "Reshape"}, {"XNNStaticReshape"}),
    "pad": ({"Constant Pad", "Static Constant Pad"}, {"XNNStaticConstantPad"}),
    "slice": ({"Slice", "Static Slice"}, {"XNNStaticSlice"}),
    "concat": ({"Concatenate"}, {"XNNConcatenate2", "XNNConcatenate3", "XNNConcatenate4", "XNNConcatenate5"}),
    "convert": ({"Convert"}, {"XNNConvert"}),
    "copy": ({"Copy"}, {"XNNCopy"}),
}
_MATMUL_PORTABLE = {"mm", "bmm", "addmm", "linear", "matmul"}


@dataclass(frozen=True)
class OpWork:
    """The work of one operator instance; NaN where unknown, with the reason."""

    macs: float = math.nan
    flops: float = math.nan
    bytes_read: float = math.nan
    bytes_written: float = math.nan
    why_unknown: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "macs": self.macs,
            "flops": self.flops,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "why_unknown": self.why_unknown,
        }


UNKNOWN = OpWork(why_unknown="not an operator this module knows")


def _numel(dims: Sequence[int]) -> int:
    return int(math.prod(int(d) for d in dims)) if dims else 1


# ------------------------------------------------------------------------------------------ the .pte
def _program(pte: Path):  # noqa: ANN202 - executorch schema type
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        return deserialize_pte_binary(read_bytes(pte, PROGRAM)).program
    except Exception as exc:  # noqa: BLE001 - any failure to parse is a bad program
        raise ProgramError(f"cannot read {pte} to compute operator work: {type(exc).__name__}: {exc}") from None


def _xnnpack_graph(blob: bytes) -> dict[str, Any]:
    """An XNNPACK delegate blob as the schema's JSON (flatc, shipped with executorch, does the reading)."""
    from executorch.backends.xnnpack.serialization import xnnpack_graph_serialize as serialize
    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    header = serialize.XNNHeader.from_bytes(blob[: serialize.XNNHeader.EXPECTED_LENGTH])
    flatbuffer = blob[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    folder = Path(tempfile.mkdtemp(prefix="sme2-xnngraph-"))
    try:
        (folder / "graph.bin").write_bytes(flatbuffer)
        shutil.copy(Path(serialize.__file__).parent / "schema.fbs", folder / "schema.fbs")
        _flatc_decompile(str(folder), str(folder / "schema.fbs"), str(folder / "graph.bin"), ["--raw-binary"])
        text = (folder / "graph.json").read_text()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # flatc writes non-finite floats (clamp bounds) bare; they are irrelevant here but must parse
    return json.loads(re.sub(r"(?<=[:\s])(-?inf|nan)(?=[,\s\]}])", r'"\1"', text))


def _node_work(graph: dict[str, Any], node: dict[str, Any]) -> OpWork:
    values = {}
    for i, entry in enumerate(graph["xvalues"]):
        value = entry["xvalue_union"]
        if "tensor_value" in value:  # XNNQuantizedTensorValue (and friends) wrap an XNNTensorValue
            value = {**value["tensor_value"], **{k: v for k, v in value.items() if k != "tensor_value"}}
        values[value.get("id_out", i)] = value
    kind, args = node["xnode_union_type"], node["xnode_union"]

    def tensor(key: str) -> tuple[int, float] | None:
        value = values.get(args.get(key)) if key in args else None
        if value is None or "dims" not in value:
            return None
        return _numel(value["dims"]), _XNN_BYTES.get(value.get("datatype", ""), math.nan)

    def size(key: str) -> float:
        found = tensor(key)
        return found[0] * found[1] if found else 0.0

    out = tensor("output_id")
    if out is None:
        return OpWork(why_unknown=f"{kind}: output tensor not in the graph")
    written = out[0] * out[1]
    inputs = [k for k in ("input_id", "input1_id", "input2_id", "input3_id", "input4_id", "input5_id") if k in args]
    if kind in ("XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected", "XNNConvTranspose2d"):
        weights = values.get(args.get("filter_id"))
        output = values[args["output_id"]]
        if weights is None:
            return OpWork(why_unknown=f"{kind}: filter tensor not in the graph")
        out_channels = int(output["dims"][-1])
        macs = out[0] * _numel(weights["dims"]) / out_channels  # per output element: the filter's other dims
        read = size("input1_id" if "input1_id" in args else "input_id") + size("filter_id") + size("bias_id")
        return OpWork(macs, 2 * macs, read, written)
    if kind == "XNNBatchMatrixMultiply":
        first = values[args["input1_id"]]
        macs = out[0] * int(first["dims"][-1])
        return OpWork(macs, 2 * macs, size("input1_id") + size("input2_id"), written)
    read = sum(size(k) for k in inputs)
    flops = float(out[0]) if classify(kind).category.value == "ELEMENTWISE" else math.nan
    return OpWork(math.nan, flops, read, written)


def _portable_work(plan: Any, kernel: Any) -> OpWork:
    """Bytes of a portable kernel call's tensors (out-variant kernels take their output last), and MACs of
    the matrix products: the output's elements times the reduced dimension (the first operand's last)."""
    name = plan.operators[kernel.op_index].name.split("::")[-1]
    tensors = []
    for index in kernel.args:
        value = plan.values[index].val
        if type(value).__name__ == "Tensor":
            code = int(getattr(value.scalar_type, "value", value.scalar_type))
            tensors.append((list(value.sizes), _ET_BYTES.get(code, math.nan)))
    if not tensors:
        return OpWork(why_unknown=f"{name}: no tensor arguments")
    *read, written = tensors
    out_elements = _numel(written[0])
    macs = math.nan
    operands = read[1:] if name == "addmm" else read
    if name in _MATMUL_PORTABLE and operands and operands[0][0]:
        macs = float(out_elements * int(operands[0][0][-1]))
    return OpWork(macs, 2 * macs, float(sum(_numel(d) * b for d, b in read)), float(out_elements * written[1]))


@dataclass
class ProgramWork:
    """Per delegate call (instruction id) the XNNPACK graph's nodes, and the plan's portable kernel calls.

    ``delegate_handles`` (the XNodes' debug handles, per delegate call), ``portable_handles`` (a kernel
    call's handles) and ``node_names`` (handle -> graph node name, from the ETRecord) let identity.py name
    each operator by its graph node; they are empty when the facts were read without an ETRecord.
    """

    pte: str
    delegate_nodes: dict[int, list[tuple[str, OpWork]]] = field(
        default_factory=dict
    )  # instruction -> (node kind, work)
    portable: dict[int, OpWork] = field(default_factory=dict)  # instruction -> work
    delegate_handles: dict[int, list[int]] = field(default_factory=dict)  # instruction -> XNode debug handles
    portable_handles: dict[int, list[int]] = field(default_factory=dict)  # instruction -> debug handles
    node_names: dict[int, str] = field(default_factory=dict)  # debug handle -> identity.node_names' name

    def node_matches(self, ops: Iterable[Any]) -> list[tuple[int, int] | str | None]:
        """Per operator of a trace: (delegate call's instruction, index of its XNode) when matched, the
        reason when not, None for a portable operator. One matching for work and identity alike."""
        ops = list(ops)
        result: list[tuple[int, int] | str | None] = [None] * len(ops)
        by_call: dict[int, list[int]] = {}
        for index, key in enumerate(ops):
            if key.delegated:
                by_call.setdefault(key.instruction_id, []).append(index)
                result[index] = "not an operator this module knows"
        for instruction, indices in by_call.items():
            nodes = self.delegate_nodes.get(instruction)
            if nodes is None:
                for i in indices:
                    result[i] = f"instruction {instruction} is not an XNNPACK delegate call"
                continue
            for group, (op_kinds, node_kinds) in _GROUPS.items():
                members = [i for i in indices if classify(ops[i].name).kind in op_kinds]
                candidates = [n for n, (kind, _) in enumerate(nodes) if kind in node_kinds]
                if not members:
                    continue
                if len(members) != len(candidates):
                    reason = (
                        f"{len(members)} {group} operators but {len(candidates)} such graph nodes in delegate "
                        f"call {instruction}: not matched"
                    )
                    for i in members:
                        result[i] = reason
                    continue
                for i, node in zip(members, candidates):
                    result[i] = (instruction, node)
        return result

    def for_ops(self, ops: Iterable[Any]) -> list[OpWork]:
        """Work of each operator of a trace (``ExecutionTrace.ops``), matched per delegate call and kind."""
        ops = list(ops)
        result: list[OpWork] = []
        for key, match in zip(ops, self.node_matches(ops)):
            if match is None:
                result.append(
                    self.portable.get(key.instruction_id, OpWork(why_unknown="no kernel call at its " "instruction"))
                )
            elif isinstance(match, tuple):
                result.append(self.delegate_nodes[match[0]][match[1]][1])
            else:
                result.append(UNKNOWN if match == UNKNOWN.why_unknown else OpWork(why_unknown=match))
        return result


def program_work(pte: str | Path) -> ProgramWork:
    """Read the work of every XNNPACK node and portable kernel call of a program (about 0.1-0.5 s)."""
    program = _program(Path(pte))
    plan = next((p for p in program.execution_plan if p.name == "forward"), program.execution_plan[0])
    work = ProgramWork(str(pte))
    graphs: dict[int, dict[str, Any]] = {}
    for index, instruction in enumerate(plan.chains[0].instructions):
        args = instruction.instr_args
        kind = type(args).__name__
        if kind == "DelegateCall":
            delegate = plan.delegates[args.delegate_index]
            if delegate.id != "XnnpackBackend":
                continue
            reference = delegate.processed
            if reference.index not in graphs:
                graphs[reference.index] = _xnnpack_graph(program.backend_delegate_data[reference.index].data)
            graph = graphs[reference.index]
            work.delegate_nodes[index] = [
                (node["xnode_union_type"], _node_work(graph, node)) for node in graph["xnodes"]
            ]
            work.delegate_handles[index] = [int(node.get("debug_handle", NO_HANDLE)) for node in graph["xnodes"]]
        elif kind == "KernelCall":
            work.portable[index] = _portable_work(plan, args)
    return work


FACTS_FILE = "program.json"  # beside model.pte in an export cache entry
FACTS_VERSION = 4  # 2: quantized tensors read through their wrapper; 3: debug handles and graph node names;
# 4: a decomposed operator's nodes named after it (identity.group_names)


def _encode(work: OpWork) -> list[Any]:
    return [None if math.isnan(v) else v for v in (work.macs, work.flops, work.bytes_read, work.bytes_written)] + [
        work.why_unknown
    ]


def _decode(row: Sequence[Any]) -> OpWork:
    macs, flops, bytes_read, bytes_written = (math.nan if v is None else float(v) for v in row[:4])
    return OpWork(macs, flops, bytes_read, bytes_written, why_unknown=row[4])


def _etrecord_beside(pte: Path) -> Path | None:
    """The ETRecord exported with a program: ``model.etrecord`` in its cache entry, else ``<stem>.etrecord``."""
    for candidate in (pte.parent / "model.etrecord", pte.with_suffix(".etrecord")):
        if candidate.is_file():
            return candidate
    return None


def _facts_of(pte: Path) -> dict[str, Any]:
    from pytest_sme2.export.program import planned_buffers

    work = program_work(pte)
    etrecord = _etrecord_beside(pte)
    names, portable_handles = graph_anchors(etrecord) if etrecord is not None else ({}, {})
    return {
        "version": FACTS_VERSION,
        "delegate_handles": {str(k): v for k, v in work.delegate_handles.items()},
        "portable_handles": {str(k): v for k, v in portable_handles.items()},
        "node_names": {str(k): v for k, v in names.items()},
        "planned_buffers": planned_buffers(pte),
        "delegate_nodes": {
            str(k): [[kind, *_encode(w)] for kind, w in nodes] for k, nodes in work.delegate_nodes.items()
        },
        "portable": {str(k): _encode(w) for k, w in work.portable.items()},
    }


@dataclass
class ProgramFacts:
    """What the exported program says without running it: planned memory and per-operator work."""

    planned_buffers: list[int]
    work: ProgramWork

    @classmethod
    def of(cls, pte: str | Path, cache_dir: Path | None = None) -> "ProgramFacts":
        """Read from ``cache_dir/program.json`` (an export cache entry), computing and writing it if missing.

        Reading the .pte needs ``executorch.exir`` (seconds to import in a fresh process), so the facts are
        written once per exported program, at export time or on first use. A document of another version, or
        one that does not decode (export.py reports such an entry as damaged before it is used), is computed
        again from the program rather than read into a KeyError.
        """
        pte = Path(pte)
        path = None if cache_dir is None else Path(cache_dir) / FACTS_FILE
        if path is not None and path.exists():
            try:
                return decode_facts(json.loads(read_bytes(path, EXPORT_RECORD, within=path.parent)), str(pte))
            except (OSError, ValueError, RecursionError, RefusedFile):
                pass
        document = _facts_of(pte)
        if path is not None:
            write_facts(document, path)
        return decode_facts(document, str(pte))


# How each part of a program.json document is read; a part that does not convert is a damaged document.
_FACTS_PARTS: dict[str, Any] = {
    "delegate_nodes": lambda v: {int(k): [(str(row[0]), _decode(row[1:])) for row in rows] for k, rows in v.items()},
    "portable": lambda v: {int(k): _decode(row) for k, row in v.items()},
    "delegate_handles": lambda v: {int(k): [int(h) for h in hs] for k, hs in v.items()},
    "portable_handles": lambda v: {int(k): [int(h) for h in hs] for k, hs in v.items()},
    "node_names": lambda v: {int(k): str(name) for k, name in v.items()},
    "planned_buffers": lambda v: [int(b) for b in v],
}


def decode_facts(document: Any, pte: str) -> ProgramFacts:
    """The facts a program.json document holds; ValueError saying which part is missing or malformed
    (never a KeyError or TypeError from deep inside), so a damaged cache entry can be named and replaced."""
    if not isinstance(document, dict):
        raise ValueError(f"{FACTS_FILE} holds a JSON {type(document).__name__}, not an object")
    if document.get("version") != FACTS_VERSION:
        raise ValueError(f"{FACTS_FILE} has version {document.get('version')!r}, not {FACTS_VERSION}")
    parts: dict[str, Any] = {}
    for key, read in _FACTS_PARTS.items():
        if key not in document:
            raise ValueError(f"{FACTS_FILE} has no {key!r}")
        try:
            parts[key] = read(document[key])
        except (TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
            raise ValueError(f"{FACTS_FILE}'s {key!r} is malformed ({type(exc).__name__}: {exc})") from None
    work = ProgramWork(
        pte,
        parts["delegate_nodes"],
        parts["portable"],
        parts["delegate_handles"],
        parts["portable_handles"],
        parts["node_names"],
    )
    return ProgramFacts(parts["planned_buffers"], work)


def write_facts(document: dict[str, Any], path: Path) -> None:
    """Atomically (concurrent writers of one cache entry write the same content), created with the mode the
    umask gives like every other file of the entry: a cache shared under umask 002 stays group-writable,
    which a NamedTemporaryFile (always 0600) did not allow. The temporary name is random and created
    exclusively without following links, then renamed over ``path``."""
    write_file(path, json.dumps(document) + "\n")


def facts_document(pte: str | Path) -> dict[str, Any]:
    """The facts of a program as stored in an export cache entry (export.py writes them at export time)."""
    return _facts_of(Path(pte))
