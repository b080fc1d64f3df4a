"""Try each of the executorch wheel's own example models as ExecuTorch's examples build them.

For every non-LLM entry of ``executorch.examples.models.MODEL_NAME_TO_MODEL`` (and two user patterns that are
not entries: Silero VAD's eager class, EfficientSAM without its checkpoint), runs
``EagerModelFactory.create_model(*MODEL_NAME_TO_MODEL[name])`` in a subprocess of its own under ``timeout``, so
that one hang or crash cannot stop the rest, and records: whether it built (else the exception's last line),
whether it tried to reach the network (an audit hook records every host looked up and URL opened; the error
chain is searched for socket, urllib and Hugging Face hub errors), the seconds it took, the parameter count and
the example inputs' shapes. With ``--dry-run-missing``, each missing package is asked of pip as
``pip install --dry-run --report - PKG`` (nothing is installed) to tell whether it would replace the CPU torch.

    python benchmarks/try_example_models.py [--timeout 240] [--only mv2,lstm] [--dry-run-missing] \\
        [--json OUT.json] [--markdown OUT.md]

Prints a markdown table. LLM entries are left to docs/llm.md (``--include-llms`` tries them too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLMS = {
    "llama2",
    "llama",
    "llama3_2_vision_encoder",
    "llava",
    "qwen2_5_1_5b",
    "phi_4_mini",
    "smollm2",
    "qwen3",
    "smolvlm",
}

# Not entries of MODEL_NAME_TO_MODEL: how a user builds the model where the entry cannot (or there is none).
EXTRA = {
    "silero_vad (SileroVAD16k)": (
        "from executorch.examples.models.silero_vad.export_silero_vad import SileroVAD16k, INPUT_SIZE, HIDDEN_DIM\n"
        "model = SileroVAD16k().eval()\n"
        "inputs = (torch.randn(1, INPUT_SIZE), torch.zeros(2, 1, HIDDEN_DIM))\n"
        "kwargs = None\n"
    ),
    "efficient_sam (checkpoint=None)": (
        "from executorch.examples.models.efficient_sam.efficient_sam_core.build_efficient_sam import "
        "build_efficient_sam\n"
        "model = build_efficient_sam(encoder_patch_embed_dim=192, encoder_num_heads=3, checkpoint=None).eval()\n"
        "inputs = (torch.randn(1, 3, 1024, 1024), torch.randint(0, 1024, (1, 1, 1, 2)).float(), "
        "torch.ones(1, 1, 1))\n"
        "kwargs = None\n"
    ),
}

# Module names in "No module named ..." and the pip package that provides them.
PACKAGE_OF = {"sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml"}

CHILD = r"""
import json, sys, time, traceback
hosts, urls = [], []
def _audit(event, args):
    if event == "socket.getaddrinfo":
        hosts.append(str(args[0]))
    elif event == "socket.connect":
        hosts.append(str(args[1]))
    elif event == "urllib.Request":
        urls.append(str(args[0]))
sys.addaudithook(_audit)
import torch
t0 = time.perf_counter()
result = {"built": False}
def shapes(x):
    if isinstance(x, torch.Tensor):
        return "x".join(map(str, x.shape)) + " " + str(x.dtype).replace("torch.", "")
    if isinstance(x, (tuple, list)):
        return [shapes(y) for y in x]
    if isinstance(x, dict):
        return {k: shapes(v) for k, v in x.items()}
    return type(x).__name__
try:
    NAME = sys.argv[1]
    CODE = sys.argv[2]
    if CODE:
        exec(CODE)
    else:
        from executorch.examples.models import MODEL_NAME_TO_MODEL
        from executorch.examples.models.model_factory import EagerModelFactory
        model, inputs, kwargs, _dyn = EagerModelFactory.create_model(*MODEL_NAME_TO_MODEL[NAME])
    result["built"] = True
    result["params"] = sum(p.numel() for p in model.parameters())
    result["inputs"] = shapes(inputs)
    result["kwarg_inputs"] = shapes(kwargs) if kwargs else None
except BaseException as exc:
    chain, e = [], exc
    while e is not None and len(chain) < 10:
        chain.append(type(e).__name__ + ": " + str(e).strip().splitlines()[-1:][0]
                     if str(e).strip() else type(e).__name__)
        e = e.__cause__ or e.__context__
    result["error"] = chain[0]
    result["error_chain"] = chain
    result["missing_module"] = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if result["missing_module"] is None:
        import re
        found = re.search(r"(\w+) package is required", str(exc))   # deit_tiny: "timm package is required ..."
        result["missing_module"] = found.group(1) if found else None
    result["traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
result["seconds"] = round(time.perf_counter() - t0, 1)
result["hosts"] = sorted(set(h for h in hosts if h not in ("None", "localhost", "127.0.0.1")))
result["urls"] = sorted(set(urls))
print("@@RESULT@@" + json.dumps(result))
"""

NETWORK_WORDS = (
    "urlerror",
    "urlopen",
    "gaierror",
    "name or service not known",
    "temporary failure in name resolution",
    "connectionerror",
    "connection refused",
    "network is unreachable",
    "max retries exceeded",
    "offlinemodeisenabled",
    "localentrynotfounderror",
    "couldn't connect",
    "huggingface.co",
    "timed out",
)


def try_one(name: str, code: str, timeout: float) -> dict:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="try-example-") as cwd:
        # A fresh working directory: nothing a model writes (checkpoints, caches) is left in the repository.
        env = dict(os.environ)
        env.setdefault("PYTHONWARNINGS", "ignore")
        try:
            proc = subprocess.run(
                ["timeout", "-k", "10", str(int(timeout)), sys.executable, "-c", CHILD, name, code],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
            )
        except OSError as exc:
            return {"name": name, "built": False, "error": f"could not start: {exc}"}
    wall = round(time.perf_counter() - started, 1)
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            result = json.loads(line[len("@@RESULT@@") :])
            break
    else:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        timed_out = proc.returncode in (124, 137)
        result = {
            "built": False,
            "error": f"timed out after {int(timeout)} s" if timed_out else f"exit {proc.returncode}: {tail[0]}",
            "hosts": [],
            "urls": [],
        }
    result["name"] = name
    result["wall_seconds"] = wall
    text = " ".join(result.get("error_chain") or [result.get("error") or ""]).lower()
    result["tried_network"] = bool(result.get("hosts") or result.get("urls")) or any(w in text for w in NETWORK_WORDS)
    return result


def dry_run(package: str) -> dict:
    """What ``pip install PKG`` would do here, asked without installing anything."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", package],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return {"package": package, "resolves": False, "error": tail[0]}
    report = json.loads(proc.stdout)
    install = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report.get("install", [])}
    nvidia = [n for n in install if n.startswith("nvidia-")]
    return {
        "package": package,
        "resolves": True,
        "version": install.get(package.lower()),
        "installs": len(install),
        "torch": install.get("torch"),
        "nvidia_packages": len(nvidia),
        "also": sorted(n for n in install if n != package.lower() and not n.startswith("nvidia-"))[:12],
    }


def needs(result: dict, dry: dict[str, dict]) -> str:
    if result.get("built"):
        return "nothing" if not result.get("tried_network") else "built, but reached for the network"
    missing = result.get("missing_module")
    if missing:
        root = missing.split(".")[0]
        pkg = PACKAGE_OF.get(root, root)
        text = f"`{pkg}` (not installed)"
        d = dry.get(pkg)
        if d:
            if not d["resolves"]:
                text += f"; pip: {d['error']}"
            elif d["torch"]:
                text += f"; `pip install {pkg}` would replace torch 2.13.0+cpu with torch {d['torch']}"
                if d["nvidia_packages"]:
                    text += f" and {d['nvidia_packages']} nvidia-* packages"
            else:
                n = d["installs"]
                text += f"; `pip install {pkg}` keeps the CPU torch ({n} package{'s' if n != 1 else ''})"
        return text
    if result.get("tried_network"):
        return "a download (no network here)"
    return "see the error"


def cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {cell(v)}" for k, v in value.items())
    return str(value).replace("|", "\\|")


def table(results: list[dict], dry: dict[str, dict]) -> str:
    rows = [
        "| entry | builds as is | needs | error (last line) | network | seconds | parameters | example inputs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        net = ", ".join(r.get("hosts") or []) or ("yes" if r.get("tried_network") else "no")
        params = f"{r['params'] / 1e6:.2f} M" if r.get("params") is not None else ""
        rows.append(
            f"| `{r['name']}` | {'yes' if r.get('built') else 'no'} | {cell(needs(r, dry))} | "
            f"{cell(r.get('error', ''))[:160]} | {cell(net)} | {r.get('seconds', r.get('wall_seconds'))} | {params} | "
            f"{cell(r.get('inputs'))} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=240, help="seconds per entry (default 240)")
    parser.add_argument("--only", help="comma-separated entry names")
    parser.add_argument("--include-llms", action="store_true", help="also try the LLM entries (docs/llm.md)")
    parser.add_argument("--no-extra", action="store_true", help="skip the two user patterns that are not entries")
    parser.add_argument("--dry-run-missing", action="store_true", help="ask pip (--dry-run) about missing packages")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args()

    from executorch.examples.models import MODEL_NAME_TO_MODEL

    entries = [(n, "") for n in MODEL_NAME_TO_MODEL if args.include_llms or n not in LLMS]
    if not args.no_extra:
        entries += list(EXTRA.items())
    if args.only:
        wanted = set(args.only.split(","))
        entries = [(n, c) for n, c in entries if n in wanted or n.split(" ")[0] in wanted]

    results = []
    for name, code in entries:
        r = try_one(name, code, args.timeout)
        print(f"{name}: {'built' if r.get('built') else r.get('error')} ({r['wall_seconds']} s)", file=sys.stderr)
        results.append(r)

    dry: dict[str, dict] = {}
    if args.dry_run_missing:
        for r in results:
            if r.get("missing_module"):
                root = r["missing_module"].split(".")[0]
                pkg = PACKAGE_OF.get(root, root)
                if pkg not in dry:
                    print(f"pip install --dry-run {pkg} ...", file=sys.stderr)
                    dry[pkg] = dry_run(pkg)

    import executorch.version
    import torch

    header = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.uname().nodename}, {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, torch {torch.__version__}, executorch {executorch.version.__version__}, "
        f"timeout {int(args.timeout)} s per entry"
    )
    text = header + "\n\n" + table(results, dry) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"machine": header, "results": results, "dry_runs": dry}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
