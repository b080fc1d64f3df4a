"""Which graph node each runtime operator implements: an identity that survives a change of the program.

The gate pairs baseline and run operators by it, so a delegate split or an inserted operator does not
shift every pairing. An operator is named by what the model author wrote (module path, aten operator,
which call of it in that module), never by execution order or per-delegate numbers. Why ETDump names,
instruction ids and raw debug handles cannot serve: docs/history.md, "How evidence/identity.py names operators".
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pytest_sme2.evidence.categories import strip_instance

NO_HANDLE = 65535  # XNode.debug_handle of nodes the lowering inserted (no graph node of their own)
ROOT = "<root>"


def graph_anchors(etrecord: str | Path) -> tuple[dict[int, str], dict[int, list[int]]]:
    """From an ETRecord: debug handle -> stable node name, and portable instruction id -> its handles.

    Empty maps when the file cannot be read (an identity is an improvement, never a reason to fail a run).
    """
    try:
        from executorch.devtools.etrecord import parse_etrecord

        record = parse_etrecord(str(etrecord))
        graph = record.edge_dialect_program.graph
        handle_map = (record._debug_handle_map or {}).get("forward") or {}  # noqa: SLF001 - no public accessor
    except Exception:  # noqa: BLE001 - any unreadable ETRecord: no anchors, pairing falls back
        return {}, {}
    return node_names(graph.nodes), {
        int(k): list(v) if isinstance(v, (list, tuple)) else [int(v)] for k, v in handle_map.items()
    }


def node_names(nodes: Iterable[Any]) -> dict[int, str]:
    """Debug handle -> ``"<module path>: <aten op>"`` (``" [k]"`` for the k-th call within one module)."""
    seen: Counter[str] = Counter()
    names: dict[int, str] = {}
    for node in nodes:
        handle = node.meta.get("debug_handle") if node.op == "call_function" else None
        if not isinstance(handle, int):
            continue
        stack = list((node.meta.get("nn_module_stack") or {}).values())
        path = (stack[-1][0] if stack and isinstance(stack[-1], tuple) else "") or ROOT
        target = getattr(node.target, "__name__", str(node.target))
        base = f"{path}: {target}"
        seen[base] += 1
        names[handle] = base if seen[base] == 1 else f"{base} [{seen[base]}]"
    return names


def op_identities(ops: Sequence[Any], node_handles: Sequence[str | None]) -> list[str]:
    """One identity per operator of a trace (``ExecutionTrace.ops``), given each one's graph-node
    handle resolved to a name (None: no node of its own, or not matched): its node's name, else its kind
    after the last named operator before it in execution order. Unique within the program."""
    out: list[str] = []
    previous = "start"
    used: Counter[str] = Counter()
    for key, anchor in zip(ops, node_handles):
        kind = strip_instance(key.name)
        name = anchor if anchor is not None else f"{kind} after {previous}"
        used[name] += 1
        out.append(name if used[name] == 1 else f"{name} [{used[name]}]")
        if anchor is not None:
            previous = anchor
    return out


def anchors_of(ops: Sequence[Any], work: Any) -> list[str] | None:
    """The identities of a trace's operators from the program's facts (work.ProgramWork), or None when
    the program's facts carry no graph names (no ETRecord beside it, or facts of an older pytest-sme2)."""
    names: Mapping[int, str] = getattr(work, "node_names", None) or {}
    if not names:
        return None
    handles: list[str | None] = []
    for key, match in zip(ops, work.node_matches(ops)):
        handle = None
        if key.delegated and isinstance(match, tuple):
            handle = work.delegate_handles.get(match[0], [None] * (match[1] + 1))[match[1]]
        elif not key.delegated:
            own = work.portable_handles.get(key.instruction_id) or []
            handle = own[-1] if own else None  # the kernel's node: the last of its handles
        handles.append(names.get(handle) if handle is not None and handle != NO_HANDLE else None)
    return op_identities(ops, handles)
