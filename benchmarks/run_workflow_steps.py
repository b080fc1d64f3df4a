"""Run a GitHub Actions workflow here, step by step, as its runner would (issue 28, item 3).

    python benchmarks/run_workflow_steps.py CLONE --store DIR [--json OUT]
    python benchmarks/run_workflow_steps.py REPO --store DIR --workflow docs/ci/github-workflow.yml \
        [--event pull_request] [--env PYTEST_SME2=/path/to/pytest_sme2-0.1.0-py3-none-any.whl]

Without --workflow: this repository's workflow (docs/ci.md's block), in CLONE, a fresh clone of this
repository. With it: that workflow file (the template for a user's own repository), in REPO, a scratch
repository of one's own. CLONE/REPO is
the checkout step's result; DIR keeps what ``actions/cache`` would keep between runs, so a second call with
the same DIR is the warm run. The workflow's ``env:`` is set, with --env replacing a value (where pytest-sme2
comes from, say, when the template's git URL cannot be reached). Every ``run:`` step is run with bash -e in
the repository, with GITHUB_ACTIONS=true and GITHUB_STEP_SUMMARY set, as on a runner. A step's ``if:`` is
judged for --event (push, the default, or pull_request): ``always()`` and ``github.event_name == '...'``
joined by ``&&``. The ``uses:`` steps are done by hand, as the action would: checkout is the repository
itself; setup-python uses the python on PATH (make a fresh venv first; pip's own cache stands in for the pip
cache); cache restores its paths from DIR (the newest entry whose key starts with a restore key) before the
job and saves them after; cache/restore and cache/save do one half each, where they stand; upload-artifact
copies its paths into DIR/artifacts. ``sudo`` is dropped when already root (this machine has no sudo).
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


def workflow(path: Path) -> dict:
    """The workflow of a .yml file, or of a markdown page's ```yaml block after MARKER (docs/ci.md)."""
    text = path.read_text()
    if path.suffix in (".yml", ".yaml"):
        return yaml.safe_load(text)
    block = re.search(re.escape(MARKER) + r".*?-->\s*```yaml\n(.*?)```", text, re.S)
    if block is None:
        sys.exit(f"{path} has no ```yaml block after {MARKER}")
    return yaml.safe_load(block.group(1))


def runs(step: dict, event: str, failed: bool) -> bool:
    """Whether a step runs: its ``if:`` (``always()``, ``github.event_name == '...'``, joined by ``&&``), and
    without ``always()`` only while no step failed."""
    condition = str(step.get("if", ""))
    terms = [t.strip() for t in condition.split("&&") if t.strip()]
    for term in terms:
        named = re.fullmatch(r"github\.event_name\s*==\s*'(\w+)'", term)
        if named is None and term != "always()":
            raise SystemExit(f"unknown condition {term!r} in if: {condition}")
        if named is not None and named.group(1) != event:
            return False
    return "always()" in terms or not failed


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
    lines = [line.strip() for line in spec.splitlines() if line.strip()]  # one path a line, as actions/cache reads
    return [Path(os.path.expanduser(p)) if p.startswith("~") else clone / p for p in lines]


def restore(step: dict, clone: Path, store: Path, env: dict[str, str]) -> str:
    key = _expand(step["with"]["key"], env)
    # one key a line: an expression holds spaces (${{ runner.os }})
    prefixes = [key] + [
        _expand(k.strip(), env) for k in str(step["with"].get("restore-keys", "")).splitlines() if k.strip()
    ]
    entries = sorted(
        (p for p in (store / "cache").glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
    )
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


def main() -> None:  # exits 1 when a run step failed, as the job would
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workflow", type=Path, help="a workflow file (default: docs/ci.md's workflow block)")
    parser.add_argument("--event", default="push", choices=("push", "pull_request"))
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="replace a value of the workflow's env:"
    )
    args = parser.parse_args()
    clone, store = args.clone.resolve(), args.store.resolve()
    store.mkdir(parents=True, exist_ok=True)
    flow = workflow(args.workflow.resolve() if args.workflow else clone / "docs" / "ci.md")
    steps = flow["jobs"]["perf"]["steps"]
    summary = store / f"step-summary-{int(time.time())}.md"
    given = dict(item.split("=", 1) for item in args.env)
    unknown = set(given) - set(flow.get("env") or {})
    if unknown:
        raise SystemExit(f"--env {', '.join(sorted(unknown))}: the workflow's env has no such name")
    env = {
        **os.environ,
        **{k: str(v) for k, v in (flow.get("env") or {}).items()},
        **given,
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "CLONE": str(clone),
        "FAKE_SHA": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True
        ).stdout.strip(),
        "FAKE_RUN_ID": str(int(time.time())),
    }
    results, saves, failed = [], [], False
    for step in steps:
        name = step.get("name") or step.get("uses") or step.get("run", "").split("\n")[0]
        started = time.monotonic()
        uses = step.get("uses", "")
        if not runs(step, args.event, failed):
            note = f"skipped: if: {step.get('if')} ({args.event}{', a step failed' if failed else ''})"
        elif uses.startswith("actions/checkout"):
            note = f"the clone {clone}"
        elif uses.startswith("actions/setup-python"):
            note = f"{shutil.which('python')} ({sys.version.split()[0]}); pip's cache stands in for cache: pip"
        elif uses.startswith("actions/cache/save"):
            note = save(step, clone, store, env)
        elif uses.startswith("actions/cache"):
            note = restore(step, clone, store, env)
            if not uses.startswith("actions/cache/restore"):
                saves.append(step)
        elif uses.startswith("actions/upload-artifact"):
            target = store / "artifacts" / f"{step['with']['name']}-{env['FAKE_RUN_ID']}"
            notes = []
            for index, source in enumerate(_paths(step["with"]["path"], clone)):
                if source.exists():
                    shutil.copytree(source, target / str(index), symlinks=True)
                notes.append(f"copied {source} to {target / str(index)}" if source.exists() else f"{source} missing")
            note = "; ".join(notes)
        elif "run" in step:
            command = step["run"]
            if os.geteuid() == 0:
                command = re.sub(r"\bsudo\s+", "", command)
            code = subprocess.run(["bash", "-e", "-c", command], cwd=clone, env=env).returncode
            note = f"exit {code}"
            failed = failed or code != 0
        else:
            note = "skipped: not a step this runner knows"
        results.append({"step": name, "seconds": round(time.monotonic() - started, 1), "note": note})
        print(json.dumps(results[-1]), flush=True)
    for step in saves:  # the cache action's post step, which saves only when the job succeeded
        note = "not saved: a step failed (as actions/cache)" if failed else save(step, clone, store, env)
        results.append({"step": f"post: {step.get('name')}", "seconds": 0.0, "note": note})
        print(json.dumps(results[-1]), flush=True)
    summary_text = summary.read_text() if summary.exists() else ""
    results.append(
        {
            "step": "job summary",
            "seconds": 0.0,
            "note": f"{len(summary_text.splitlines())} lines"
            + (", starts with: " + summary_text.splitlines()[0] if summary_text else ""),
        }
    )
    print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
