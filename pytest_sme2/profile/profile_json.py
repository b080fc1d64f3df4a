"""The one JSON form of a Profile (Profile.to_dict): the report's profile entry (summary.json, HTML, CSV), the
history line, ``pytest-sme2 analyze --json`` and the gate record (gate/record.py, GateRecord.of takes from it) all
read this dict, so every quantity is named and converted here once (docs/artifacts.md). Emulated time is not time: an
emulated profile's JSON holds no emulator milliseconds at all.

Its functions take the Profile as ``Any``: this module is the Profile's own serialisation, called from
Profile.to_dict, and naming the type would make the two modules import each other (for type checking only, which
the import-graph test counts too)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from pytest_sme2.evidence.categories import Category
from pytest_sme2.evidence.etdump import op_id
from pytest_sme2.evidence.identity import anchors_of
from pytest_sme2.profile import stats
from pytest_sme2.profile.breakdown import INSTRUCTIONS

KERNELS_PER_OP = 5  # kernels kept per operator event in the JSON form (the rest are in the sampled process's perf.data)
WORTH_DELEGATING = 0.05  # a portable operator above this share of E2E is worth delegating


def profile_dict(self: Any, top: int = 10) -> dict[str, Any]:
    """The one JSON form of this profile: the report's profile entry (summary.json, HTML, CSV), the history
    line, ``pytest-sme2 analyze --json`` and the gate record (GateRecord.of takes from it) all
    read this dict, so every quantity is named and converted here once (docs/artifacts.md). Its keys, in
    order: the runs and their times, then where the time or instructions went, then the evidence."""
    # Emulated time is not time: an emulated profile's JSON holds no emulator milliseconds at all, neither
    # under latency names nor per operator, so no consumer of summary.json can read them as latency.
    timed = not self.emulated
    return {**_runs_part(self, timed), **_shares_part(self), **_evidence_part(self, timed, top)}


def _runs_part(self: Any, timed: bool) -> dict[str, Any]:
    """profile_dict's first keys: the model and variant, its runs, their latency and start-up, which were
    disturbed."""
    return {
        "model": self.model,
        "recipe": self.recipe,
        "emulated": self.emulated,
        "variant": self.variant,
        "sme2": self.metadata.get("run", {}).get("sme2"),  # as requested: None is the target's default
        "runs": self.runs,
        "e2e_ms": [float(x) for x in self.e2e_ms] if timed else None,
        "latency": self.latency.as_dict() if timed else None,
        "wall_latency": stats.SampleStats.of(self.wall_ms).as_dict()
        if timed and self.wall_ms is not None and len(self.wall_ms)
        else None,
        "relative_latency": stats.SampleStats.of(self.relative_ms).as_dict(unit="")
        if self.relative_ms is not None
        else None,
        # The reference program's time before each run: the gate compares e2e_ms / reference_ms.
        "reference_ms": [float(x) for x in self.reference_ms]
        if self.relative_ms is not None and self.reference_ms is not None
        else None,
        # Runs per process, in order: the gate compares process medians (stats.ReplicaShift).
        "replica_sizes": self.replica_sizes,
        "load_ms": self.load_ms if timed else None,  # emulated: counted, under instructions.load / init
        "init_ms": self.init_ms if timed else None,
        # Runs per runner process, and each one's load and init (hardware): the gate judges those per process.
        "chunk_sizes": self.chunk_sizes,
        "load_ms_per_chunk": self.load_ms_per_chunk,
        "init_ms_per_chunk": self.init_ms_per_chunk,
        "load_relative_per_chunk": self.load_relative_per_chunk,
        "init_relative_per_chunk": self.init_relative_per_chunk,
        "disturbed_runs": self.disturbed_runs,
        # Which runs: the Profile also sees stalls inside one operator, which e2e_ms alone cannot show.
        "disturbed_run_indices": self.disturbed_run_indices,
        "disturbed_references": self.disturbed_references,
        "throttled_runs": self.throttled,
    }


def _shares_part(self: Any) -> dict[str, Any]:
    """profile_dict's middle keys: the basis, memory, and where the time or instructions went (shares,
    delegation, SME path)."""
    memory = self.metadata.get("memory") or {}
    return {
        "basis": self.basis,
        "memory": {
            "planned_bytes": self.planned_memory_bytes,
            "planned_buffers": memory.get("planned_buffers"),
            "peak_rss_kb_median": None if self.peak_rss_kb is None else float(np.median(self.peak_rss_kb)),
            "peak_rss_kb": None if self.peak_rss_kb is None else [int(kb) for kb in self.peak_rss_kb],
        },
        "shares": self.shares,
        # Per-run values behind the medians: the gate judges these like latency samples. Emulated time
        # decides nothing, so an emulated profile has none (its counted instructions are judged instead).
        "per_run": None
        if self.emulated
        else {
            "shares": {c: _finite_list(self.share_samples(c)) for c in self.shares},
            "delegation_coverage": _finite_list(self.coverage_samples),
            "sme_path_share": None if self.sme_path_samples is None else _finite_list(self.sme_path_samples),
        },
        # OTHER's part that is delegate time outside every delegate operator (by the basis)
        "other_delegate_outside_ops": self.delegate_outside_ops_share(),
        "total_shares": self.total_shares,
        "instructions": _counted(self),
        "delegation_coverage": self.delegation_coverage,
        "node_delegation_coverage": self.node_delegation_coverage,
        "delegation": _delegation(self),
        "sme_path_share": self.sme_path_share,
        "sme_path_basis": self.sme_path_basis,
        "sme_path_ops": self.sme_path_ops,
    }


def _evidence_part(self: Any, timed: bool, top: int) -> dict[str, Any]:
    """profile_dict's last keys: work, kernels and operators (the ``top`` heaviest), metadata and artifacts."""
    top_ops = self.top_ops(top)
    share = "instruction_share" if self.basis == INSTRUCTIONS else "share"
    portable = [_json_row(row, timed) for row in self.portable_ops.to_dict("records")]
    executed = self.executed_sme_kernels  # from a kernel trace (emulated target); None when not traced
    return {
        "work": self.work_by_category(),
        "kernel_time": None if self.kernel_time is None else self.kernel_time.as_dict(top=KERNELS_PER_OP),
        # which CONV/GEMM kernels ran is evidence on every target; their share needs a measure (not emulator time)
        "kernels": _heavy_kernels(self, share if timed or self.basis == INSTRUCTIONS else None),
        "executed_sme_kernels": list(executed) if executed is not None else None,
        "top_ops": [
            _json_row({k: v for k, v in row.items() if k not in ("runs_ms", "kernels")}, timed)
            | ({"kernels": row["kernels"]} if "kernels" in row else {})
            for row in top_ops.to_dict("records")
        ],
        "portable_ops": portable,
        # by the profile's basis: on a counted emulated run its instructions, never the emulator's time
        "worth_delegating": [op["op"] for op in portable if (op.get(share) or 0.0) > WORTH_DELEGATING],
        "unclassified_ops": self.unclassified_ops,
        "metadata": self.metadata,
        "artifacts": self.artifacts,
    }


def _delegation(self: Any) -> dict[str, Any] | None:
    """The export's delegation facts, its per-operator-type table as {op type: [delegated, not delegated]}."""
    if not self.delegation:
        return None
    delegation = dict(self.delegation)
    ops = {op["op_type"]: [op["delegated"], op["non_delegated"]] for op in delegation.pop("ops", [])}
    return {**delegation, "ops": ops}


def _heavy_kernels(self: Any, share: str | None) -> list[dict[str, Any]]:
    """The CONV and GEMM operators by kernel name, heaviest first: what the kernel evidence shows. ``share``
    None (an uncounted emulated run): no share, in execution order."""
    ops = self.ops
    heavy = ops[ops["category"].isin([Category.CONV.value, Category.GEMM.value])]
    kernels = [
        {
            "op": op,
            "category": rows["category"].iloc[0],
            "packed": bool(rows["packed"].iloc[0]),
            "instances": int(len(rows)),
            "share": None if share is None else float(rows[share].sum()),
        }
        for op, rows in heavy.groupby("op", sort=False)
    ]
    return kernels if share is None else sorted(kernels, key=lambda k: k["share"], reverse=True)


def _counted(self: Any) -> dict[str, Any] | None:
    """What the counted run says (None where nothing was counted): the whole inference's instructions and
    SME instructions, the same per operator, shares, coverage and SME path by instructions, the SME kernels
    that executed. All deterministic: the gate compares them with plain tolerances."""
    if self.instructions is None:
        return None
    counted = self.instructions.instructions
    whole = lambda value: None if value is None else int(round(value))  # noqa: E731 - exact counts stay ints
    ops = self.ops
    keys = self.trace.ops
    record: dict[str, Any] = {
        "source": "qemu (emulated target)",
        "per_inference": whole(self.instructions_per_inference),
        "sme_per_inference": whole(self.sme_instructions_per_inference),
        "sme_share_of_conv_gemm": self.sme_instruction_share,
        "shares": self.shares_by(INSTRUCTIONS),
        "delegation_coverage": self.coverage(INSTRUCTIONS),
        "sme_path_share": self.sme_path_share,
        "sme_path_basis": self.sme_path_basis,
        "load": whole(counted.load_value),
        "init": whole(counted.init_value),
        # [execution order, instructions, SME instructions]: the baseline file's keys are sorted; the order
        # keeps what the gate needs to pair operators of records without identities
        # (gate/checks/pairing.py, align_ops).
        "ops": {
            op_id(key): [order, int(round(ins)), int(round(sme))]
            for order, (key, ins, sme) in enumerate(zip(keys, ops["instructions"], ops["sme_instructions"]))
        },
        "sme_kernels": list(self.executed_sme_kernels or ()),
    }
    if self.instructions.classes is not None:  # one inference's instructions per class (a device model's input)
        record["mix"] = {
            name: whole(float(np.median(trace.execute_values))) for name, trace in self.instructions.classes.items()
        }
    # Each operator's graph node (identity.py): what pairs it with the baseline's across a delegate split.
    identities = anchors_of(keys, self.work) if self.work is not None else None
    if identities is not None:
        record["op_identity"] = {op_id(key): name for key, name in zip(keys, identities)}
    return record


# An operator row's columns measured in time (ms, or a share of E2E time): left out of an emulated profile's JSON.
_TIME_COLUMNS = frozenset({"median_ms", "mean_ms", "total_ms", "share", "median_ms_per_run"})


def _json_row(row: Mapping[str, Any], timed: bool) -> dict[str, Any]:
    """One operator row as JSON values; without its time columns when ``timed`` is False (emulated)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items() if timed or k not in _TIME_COLUMNS}


def _finite_list(values: Any) -> list[float | None]:
    """Per-run values for JSON: NaN (a run without that kind of time) becomes null."""
    return [float(x) if np.isfinite(x) else None for x in values]
