"""Run the README's GitHub Actions workflow here, step by step, as its runner would (issue 28, item 3).

    python benchmarks/run_workflow_steps.py CLONE --store DIR [--json OUT]

CLONE is a fresh clone of this repository (the checkout step's result); DIR keeps what ``actions/cache``
would keep between runs, so a second call with the same DIR is the warm run. Every ``run:`` step is run
with bash -e in CLONE, with GITHUB_ACTIONS=true and GITHUB_STEP_SUMMARY set, as on a runner. The ``uses:``
steps are done by hand, as the action would: checkout is CLONE itself; setup-python uses the python on PATH
(make a fresh venv first; pip's own cache stands in for the pip cache); cache restores its paths from DIR
(the newest entry whose key starts with a restore key) before the job and saves them after; upload-artifact
copies its path into DIR/artifacts. ``sudo`` is dropped when already root (this machine has no sudo).
Prints each step's seconds and writes them as JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

MARKER = "<!-- sme2-workflow"


def workflow(readme: Path) -> dict:
    text = readme.read_text()
    block = re.search(re.escape(MARKER) + r".*?-->\s*```yaml\n(.*?)```", text, re.S)
    if block is None:
        sys.exit(f"{readme} has no ```yaml block after {MARKER}")
    return yaml.safe_load(block.group(1))


def _expand(text: str, env: dict[str, str]) -> str:
    """The ${{ ... }} expressions this workflow uses, as a runner would fill them."""
    def value(match: re.Match) -> str:
        expression = match.group(1).strip()
        if expression == "runner.os":
            return "Linux"
        if expression in ("github.sha", "github.run_id"):
            return env["FAKE_" + expression.split(".")[1].upper()]
        hashed = re.fullmatch(r"hashFiles\('([^']+)'\)", expression)
        if hashed:
            import hashlib

            return hashlib.sha256(Path(env["CLONE"], hashed.group(1)).read_bytes()).hexdigest()[:16]
        raise SystemExit(f"unknown expression ${{{{ {expression} }}}}")
    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _paths(spec: str, clone: Path) -> list[Path]:
    return [Path(os.path.expanduser(p)) if p.startswith("~") else clone / p for p in spec.split()]


def restore(step: dict, clone: Path, store: Path, env: dict[str, str]) -> str:
    key = _expand(step["with"]["key"], env)
    prefixes = [key] + [_expand(k, env) for k in str(step["with"].get("restore-keys", "")).split()]
    entries = sorted((p for p in (store / "cache").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime,
                     reverse=True)
    hit = next((e for prefix in prefixes for e in entries if e.name.startswith(prefix)), None)
    if hit is None:
        return f"cache miss ({key})"
    for index, path in enumerate(_paths(step["with"]["path"], clone)):
        saved = hit / str(index)
        if saved.exists():
            shutil.rmtree(path, ignore_errors=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(saved, path, symlinks=True)
    return f"restored {hit.name}"


def save(step: dict, clone: Path, store: Path, env: dict[str, str]) -> str:
    key = _expand(step["with"]["key"], env)
    target = store / "cache" / key
    if target.exists():
        return f"key {key} exists: not saved (as actions/cache)"
    for index, path in enumerate(_paths(step["with"]["path"], clone)):
        if path.exists():
            shutil.copytree(path, target / str(index), symlinks=True)
    return f"saved {key}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    clone, store = args.clone.resolve(), args.store.resolve()
    store.mkdir(parents=True, exist_ok=True)
    steps = workflow(clone / "README.md")["jobs"]["perf"]["steps"]
    summary = store / f"step-summary-{int(time.time())}.md"
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "CLONE": str(clone),
           "FAKE_SHA": subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                                      text=True).stdout.strip(), "FAKE_RUN_ID": str(int(time.time()))}
    results, saves = [], []
    for step in steps:
        name = step.get("name") or step.get("uses") or step.get("run", "").split("\n")[0]
        started = time.monotonic()
        uses = step.get("uses", "")
        if uses.startswith("actions/checkout"):
            note = f"the clone {clone}"
        elif uses.startswith("actions/setup-python"):
            note = f"{shutil.which('python')} ({sys.version.split()[0]}); pip's cache stands in for cache: pip"
        elif uses.startswith("actions/cache"):
            note = restore(step, clone, store, env)
            saves.append(step)
        elif uses.startswith("actions/upload-artifact"):
            source = clone / step["with"]["path"]
            target = store / "artifacts" / f"{step['with']['name']}-{env['FAKE_RUN_ID']}"
            note = f"{source} missing"
            if source.exists():
                shutil.copytree(source, target, symlinks=True)
                note = f"copied {source} to {target}"
        elif "run" in step:
            command = step["run"]
            if os.geteuid() == 0:
                command = re.sub(r"\bsudo\s+", "", command)
            code = subprocess.run(["bash", "-e", "-c", command], cwd=clone, env=env).returncode
            note = f"exit {code}"
            if code != 0 and step.get("if") != "always()":
                results.append({"step": name, "seconds": time.monotonic() - started, "note": note})
                print(json.dumps(results[-1]), flush=True)
                break
        else:
            note = "skipped: not a step this runner knows"
        results.append({"step": name, "seconds": round(time.monotonic() - started, 1), "note": note})
        print(json.dumps(results[-1]), flush=True)
    for step in saves:  # the cache action's post step
        results.append({"step": f"post: {step.get('name')}", "seconds": 0.0, "note": save(step, clone, store, env)})
        print(json.dumps(results[-1]), flush=True)
    summary_text = summary.read_text() if summary.exists() else ""
    results.append({"step": "job summary", "seconds": 0.0,
                    "note": f"{len(summary_text.splitlines())} lines" + (", starts with: " +
                                                                          summary_text.splitlines()[0]
                                                                          if summary_text else "")})
    print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
