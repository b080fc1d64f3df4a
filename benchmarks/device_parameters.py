"""The Apple M4 numbers of pytest_sme2/profile/devices/apple-m4.toml, read from the published measurements.

Why a script: every rate of a device file must say where it came from; this re-derives the M4 file's
SME rates and bandwidths from tzakharko/m4-sme-exploration's results so anyone can check them:

    git clone https://github.com/tzakharko/m4-sme-exploration
    python benchmarks/device_parameters.py m4-sme-exploration [--check]

Per instruction (op_benchmarks.json): one thread, median of its 20 repetitions, best over the number of
independent instructions, in G instructions per second (GOPS / operations per instruction). Bandwidths
(sme-memcpy.json): one thread, best over unrolling, per buffer size. ``--check`` compares with the file.
"""

from __future__ import annotations

import argparse
import bz2
import json
import statistics
import sys
from pathlib import Path

from pytest_sme2.system.toml_reader import tomllib

DEVICE_FILE = Path(__file__).resolve().parents[1] / "pytest_sme2" / "profile" / "devices" / "apple-m4.toml"
# device-file class -> the op_benchmarks label it is read from
INSTRUCTIONS = {
    "mopa_fp32": "FMOPA (FP32)",
    "mopa_fp16": "FMOPA (FP16 into FP32, 2-way)",
    "mopa_int8": "SMOPA (I8 into I32, 4-way)",
    "mopa_other": "SMOPA (I16 into I32, 2-way)",
    "za_vgx2": "FMLA (FP32, two vectors)",
    "za_vgx4": "FMLA (FP32, four vectors)",
    "sve_other": "FMLA (FP32, one vector)",
}
L2_SIZES = (3072, 6291456)  # the sizes over which loads keep their L2 speed
DRAM_SIZE = 50331648


def instruction_rates(repo: Path) -> dict[str, float]:
    rows = json.loads(bz2.decompress((repo / "results" / "op_benchmarks.json.bz2").read_bytes()))
    best: dict[str, float] = {}
    for row in rows:
        if row["threads_h"] != 1 or row["threads_l"] != 0:
            continue
        rate = statistics.median(row["gops"]) / row["ops_per_instruction"]
        best[row["label"]] = max(best.get(row["label"], 0.0), rate)
    return {cls: round(best[label], 3) for cls, label in INSTRUCTIONS.items()}


def bandwidths(repo: Path) -> dict[str, float]:
    """Z-register loads and stores by one thread: the median over the sizes that fit in L2, and at 48 MB."""
    rows = json.loads((repo / "results" / "sme-memcpy.json").read_text())
    best: dict[tuple[str, int], float] = {}
    for row in rows:
        if row["threads"] == 1 and row["storage"] == "z":
            key = (row["type"], row["size"])
            best[key] = max(best.get(key, 0.0), statistics.median(row["gbps"]))

    def in_l2(kind: str) -> float:
        return round(
            statistics.median(v for (k, size), v in best.items() if k == kind and L2_SIZES[0] <= size <= L2_SIZES[1]), 1
        )

    return {
        "l2_load_gb_per_s (median over L2 sizes)": in_l2("load"),
        "l2_store_gb_per_s (median over L2 sizes)": in_l2("store"),
        "dram_load_gb_per_s": round(best[("load", DRAM_SIZE)], 1),
        "dram_store_gb_per_s": round(best[("store", DRAM_SIZE)], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of tzakharko/m4-sme-exploration")
    parser.add_argument("--check", action="store_true", help="fail when the device file differs by more than 1%")
    args = parser.parse_args(argv)
    rates, memory = instruction_rates(args.repo), bandwidths(args.repo)
    device = tomllib.loads(DEVICE_FILE.read_text())
    in_file = {**device["resources"]["sme_compute"]["per_ns"], **device["memory"]}
    differ = 0
    for name, value in {**rates, **memory}.items():
        key = name.split(" ")[0]
        ok = abs(in_file[key] - value) <= 0.01 * value
        differ += not ok
        print(f"{name:45s} measured {value:9.3f}   device file {in_file[key]:9.3f}   {'ok' if ok else 'DIFFERS'}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
