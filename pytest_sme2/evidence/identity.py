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
# Nodes that are plumbing, not operators the model author wrote: tuple unpacking and the delegate call itself.
PLUMBING = ("getitem", "executorch_call_delegate")


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
    """Debug handle -> ``"<module path>: <aten op>"`` (``" [k]"`` for the k-th such call within one module)."""
    groups = handle_groups(node for node in nodes if is_operator(node))
    return {
        handle: name for (handle, _), name in zip(groups, group_names([m for _, m in groups])) if handle is not None
    }


def is_operator(node: Any) -> bool:
    """A call the model author's code made, not plumbing (tuple unpacking, the delegate call itself)."""
    return node.op == "call_function" and target_name(node) not in PLUMBING


def target_name(node: Any) -> str:
    return getattr(node.target, "__name__", str(node.target))


def module_path(node: Any) -> str:
    """The innermost module the node was traced in ("<root>" outside every submodule)."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    return (stack[-1][0] if stack and isinstance(stack[-1], tuple) else "") or ROOT


def handle_groups(nodes: Iterable[Any]) -> list[tuple[int | None, list[Any]]]:
    """Operator nodes grouped by debug handle, in handle order (handles are numbered in the order of the graph
    before lowering); a node without a handle is a group of its own, after every numbered one, in graph order."""
    numbered: dict[int, list[Any]] = {}
    unnumbered: list[tuple[int | None, list[Any]]] = []
    for node in nodes:
        handle = node.meta.get("debug_handle")
        if isinstance(handle, int):
            numbered.setdefault(handle, []).append(node)
        else:
            unnumbered.append((None, [node]))
    return [(handle, numbered[handle]) for handle in sorted(numbered)] + unnumbered


def group_names(groups: Sequence[Sequence[Any]]) -> list[str]:
    """One name per group of nodes that share a debug handle: its module path and the operator the model's
    code called. A decomposition keeps the handle of the operator it replaced on every node it makes (a
    layer_norm's native_layer_norm, a matmul's views, expands and bmm, a bicubic resize's 162 gathers, adds and
    clamps), so a group of several nodes is named after that operator (``from_node`` provenance), not after
    whichever of its nodes came last: "blocks.0.attn: aten.matmul.default", not "...: aten.view_copy.default [7]".
    A node alone keeps its own operator's name."""
    seen: Counter[str] = Counter()
    out = []
    for members in groups:
        op = target_name(members[0]) if len(members) == 1 else source_op(members[0]) or target_name(members[-1])
        base = f"{module_path(members[0])}: {op}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base} [{seen[base]}]")
    return out


def source_op(node: Any) -> str | None:
    """The operator of the exported graph that decompositions turned into this node (the root of its
    ``from_node`` chain), e.g. ``aten.upsample_bicubic2d.vec``; None without provenance."""
    sources = node.meta.get("from_node") or []
    if not sources:
        return None
    source = sources[0]
    while getattr(source, "from_node", None):
        source = source.from_node[0]
    target = getattr(source, "target", None)
    return str(target) if target else None


def op_identities(ops: Sequence[Any], node_handles: Sequence[str | None]) -> list[str]:
    """One identity per operator of a trace (``ExecutionTrace.ops``), given each one's graph-node
    handle resolved to a name (None: no node of its own, or not matched): its node's name, else its kind
    after the last named operator before it in execution order. Unique within the program."""
    out: list[str] = []
    previous = "start"
    used: Counter[str] = Counter()
    taken: set[str] = set()
    for key, anchor in zip(ops, node_handles):
        kind = strip_instance(key.name)
        name = anchor if anchor is not None else f"{kind} after {previous}"
        used[name] += 1
        identity = name if used[name] == 1 else f"{name} [{used[name]}]"
        while identity in taken:  # "X [2]" of the second call of X, and the second operator of X's node
            used[name] += 1
            identity = f"{name} [{used[name]}]"
        taken.add(identity)
        out.append(identity)
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
