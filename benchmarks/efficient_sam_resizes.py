"""Where EfficientSAM's portable gathers come from: the model as the wheel builds it, with its positional embedding
resized once at build, and with its output masks resized bilinearly, each counted SME2 on and off (emulated target,
one warmup and one timed inference, exact instruction counts; the seconds are the emulator's, not the model's).

    python benchmarks/efficient_sam_resizes.py [--json OUT] [--work DIR]

Prints per variant the instructions per inference and the three heaviest operator kinds (docs/example_models.md,
"Coverage by nodes can hide where the work is").
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

from _common import REPO, machine

sys.path.insert(0, str(REPO / "tests"))
from helpers_emulated import counted_profiles  # noqa: E402 - the tests' counted-run helper, on the path above

from pytest_sme2.gate.baselines import record_of  # noqa: E402

# The bilinear variant swaps the wheel module's F when it builds: last, so no other variant is built after it in a
# process that loaded it (the export itself runs in a child process)
VARIANTS = {
    "efficient_sam": REPO / "models" / "efficient_sam.py",
    "efficient_sam_folded": REPO / "benchmarks" / "models" / "efficient_sam_folded.py",
    "efficient_sam_bilinear": REPO / "benchmarks" / "models" / "efficient_sam_bilinear.py",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, help="keep the sessions here (default: a temporary folder)")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    args = parser.parse_args()
    print(machine(), flush=True)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        for name, path in VARIANTS.items():
            # the copied model file lives outside models/: its import of the shared builder is made absolute
            source = path.read_text().replace("from ._efficient_sam", "from models._efficient_sam")
            for profile in counted_profiles(work / name, name, [True, False], source=source, cache=args.cache_dir):
                record = record_of(profile).to_json()
                counted = record["instructions"]
                total = counted["per_inference"]
                kinds: collections.Counter[str] = collections.Counter()
                for op, values in counted["ops"].items():
                    kinds[op.split(" @")[0].split(" #")[0]] += values[1]
                key = f"{name} sme2={'on' if 'sme2=on' in record['variant'] else 'off'}"
                out[key] = {"per_inference": total, "heaviest": kinds.most_common(4)}
                shares = ", ".join(f"{kind} {count / total:.1%}" for kind, count in kinds.most_common(3))
                print(f"{key}: {total:,} instructions an inference; {shares}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "variants": out}, indent=1))


if __name__ == "__main__":
    main()
