"""Cold vs cached export time of the bundled models (fp32 and the other recipes).

Cold: a fresh cache directory, in this process (the first lowering in a
process pays a one-time 4-5 s that is reported separately). Cached: a new
process with the same cache directory, so nothing is memoised in memory;
measures model import, stage 1 of the export (build the eager model,
torch.export it, digest the program: the cache key) and the cache lookup.
The first torch.export in a process pays a one-time cost, measured on its
own (a trace of the tiny reference program) before the cached rows.
Target: cached under 0.5 s per model (the toy models; mobilenet_v3_small and
the transformer spend longer building their eager model and tracing it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import MODELS, machine, session

from pytest_sme2 import Recipe

RECIPES = {
    "fp32": Recipe("fp32"),
    "fp16": Recipe("fp16"),
    "int8-static": Recipe("int8", "static"),
    "int8-dynamic": Recipe("int8", "dynamic"),
}

_CACHED = """
import json, sys, time
sys.path.insert(0, {bench!r})
from pathlib import Path
from _common import session
from pytest_sme2 import Recipe
import torch, executorch.version  # imports are not part of the cache lookup
from pytest_sme2.export import reference_program
from pytest_sme2.export.export import trace
from pytest_sme2.model.registry import ModelRegistry
sess = session(Path({root!r}))
out = {{}}
start = time.perf_counter()
registry = ModelRegistry()
registry.register(reference_program.NAME, reference_program)
trace(registry.get(reference_program.NAME), Recipe())
out["first trace"] = (time.perf_counter() - start, None)
for name in {models!r}:
    for label, args in {recipes!r}.items():
        start = time.perf_counter()
        exported = sess.export(name, Recipe(*args))
        out[f"{{name}} {{label}}"] = (time.perf_counter() - start, exported.from_cache)
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recipes", default="fp32,fp16,int8-static,int8-dynamic")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    recipes = {k: RECIPES[k] for k in args.recipes.split(",")}
    models = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sess = session(root)
        cold = {}  # the first row also pays the process's one-time first-lowering cost
        for name in models:
            for label, recipe in recipes.items():
                start = time.perf_counter()
                sess.export(name, recipe)
                cold[f"{name} {label}"] = time.perf_counter() - start
        sess.close()
        script = _CACHED.format(
            bench=str(Path(__file__).parent),
            root=str(root),
            models=models,
            recipes={k: (r.dtype, r.quant, r.partitioner) for k, r in recipes.items()},
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        cached = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"machine: {machine()}")
    print(f"first torch.export in the cached process (once per process): {cached['first trace'][0]:.2f} s")
    print("| model | recipe | cold export (s) | cached, new process (s) | from cache |")
    print("|---|---|---|---|---|")
    for key, seconds in cold.items():
        name, label = key.split(" ")
        print(f"| {name} | {label} | {seconds:.1f} | {cached[key][0]:.3f} | {cached[key][1]} |")


if __name__ == "__main__":
    main()
