"""``pytest-sme2 cache prune``: bring ``.sme2/`` within its bound now, or list what that would remove.

Why a command beside the bound every session keeps at its end: a cache restored in CI, a folder shared by
several projects, or a smaller bound for one run (``--max-size 2GB``, ``--older-than 30``). The folders and the
bound default to what the plugin uses: the ``sme2_cache_dir``, ``sme2_artifacts_dir``, ``sme2_baselines_dir``,
``sme2_max_size`` and ``sme2_keep_sessions`` of the pytest configuration found from ``--project`` (as ``cache
verify`` finds it, cli/project_models.py), relative to that file's folder as pytest takes them from its rootdir.
The work is measure/prune.py's.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from pytest_sme2.cli.project_models import configuration
from pytest_sme2.errors import UsageError
from pytest_sme2.measure import prune
from pytest_sme2.plugin.options import BY_NAME


def add_parser(cache_commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = cache_commands.add_parser(
        "prune",
        help="remove the least recently used export and result cache entries and the oldest session folders "
        "until .sme2/ is within its bound (ini sme2_max_size, sme2_keep_sessions); --dry-run lists them",
    )
    parser.add_argument(
        "--max-size",
        metavar="SIZE",
        help=f"the most the cache and session folders may hold together, e.g. 5GB, 500MB, 1.5GiB (0: no bound; "
        f"default: ini sme2_max_size, else {prune.DEFAULT_MAX_SIZE})",
    )
    parser.add_argument(
        "--older-than", type=_days, metavar="DAYS", help="also remove whatever was last used more than DAYS ago"
    )
    parser.add_argument(
        "--keep-sessions",
        metavar="N",
        help=f"session folders kept, the newest (0: all; default: ini sme2_keep_sessions, else "
        f"{prune.DEFAULT_KEEP_SESSIONS})",
    )
    parser.add_argument(
        "--cache-dir", metavar="DIR", help="the cache folder (default: ini sme2_cache_dir, else .sme2/cache)"
    )
    parser.add_argument(
        "--artifacts-dir",
        metavar="DIR",
        help="the artifacts folder (default: ini sme2_artifacts_dir, else .sme2/artifacts)",
    )
    parser.add_argument(
        "--project",
        default=".",
        metavar="DIR",
        help="the project whose pytest configuration gives the defaults (default: the current folder, found "
        "as pytest finds it)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    parser.set_defaults(handler=run)


def _days(text: str) -> float:
    """argparse type of --older-than: a number of days > 0."""
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    if not math.isfinite(days) or days <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days above 0, e.g. 30")
    return days


def _keep(text: str, where: str) -> int:
    if not str(text).strip().isdigit():
        raise UsageError(f"{where} is not a whole number of session folders >= 0, e.g. 20 (0: keep them all)")
    return int(str(text).strip())


def _folder(given: str | None, ini: dict[str, Any], name: str, root: Path) -> tuple[Path, bool]:
    """The folder of setting ``name``: as given (relative to the current folder), else the ini's or the
    default, relative to ``root``; and whether it was given."""
    if given:
        return Path(given).expanduser(), True
    raw = str(ini.get(BY_NAME[name].ini_key) or BY_NAME[name].default)
    path = Path(raw).expanduser()
    return (path if path.is_absolute() else root / path), False


def run(args: argparse.Namespace) -> int:
    project = prune.checked_folder(Path(args.project), "project folder", "give --project a folder")
    found = configuration(project)
    root, ini = (found[0].parent, found[1]) if found else (project, {})
    where = f"in {found[0]}" if found else ""
    max_text = args.max_size if args.max_size is not None else ini.get("sme2_max_size") or prune.DEFAULT_MAX_SIZE
    max_bytes = prune.parse_size(
        max_text, f"--max-size {args.max_size}" if args.max_size is not None else f"ini sme2_max_size {where}"
    )
    keep_text = args.keep_sessions if args.keep_sessions is not None else ini.get("sme2_keep_sessions")
    keep = prune.DEFAULT_KEEP_SESSIONS
    if keep_text not in (None, ""):
        keep = _keep(
            keep_text,
            f"--keep-sessions {keep_text}" if args.keep_sessions is not None else f"ini sme2_keep_sessions {where}",
        )
    named: dict[str, Path | None] = {}
    for name, what, option in (
        ("cache_dir", "cache folder", "--cache-dir"),
        ("artifacts_dir", "artifacts folder", "--artifacts-dir"),
    ):
        folder, given = _folder(getattr(args, name), ini, name, root)
        fix = f"give {option} the folder of --sme2-{name.replace('_', '-')}"
        if given or folder.exists() or folder.is_symlink():
            named[name] = prune.checked_folder(folder, what, fix)
        else:
            print(f"no {what} at {folder}: nothing of it to prune")
            named[name] = None
    if named["cache_dir"] is None and named["artifacts_dir"] is None:
        raise UsageError(
            f"nothing to prune in {root}: it has no cache or artifacts folder; run in the project folder, or give "
            "--project, --cache-dir or --artifacts-dir"
        )
    baselines, _ = _folder(None, ini, "baselines_dir", root)
    folders = prune.Folders(named["cache_dir"], named["artifacts_dir"], baselines)
    bound = prune.Bound(max_bytes, args.older_than or 0.0, keep)
    outcome = prune.prune(folders, bound, dry_run=args.dry_run)
    for line in lines(outcome, folders, bound, args.dry_run):
        print(line)
    return 0


def lines(outcome: prune.Outcome, folders: prune.Folders, bound: prune.Bound, dry_run: bool) -> list[str]:
    """One line per item removed (or, dry, to be removed) and per item the bound would remove that stays, then
    the totals."""
    verb = "would remove" if dry_run else "removed"
    out = [
        f"{verb:>12}  {item.kind:<14}  {prune.shown(freed):>9}  last used {_when(item.last_used)}  {item.path}"
        for item, freed in outcome.removed
    ]
    out += [f"{'kept':>12}  {item.kind:<14}  {item.path}: {why}" for item, why in outcome.skipped]
    places = " and ".join(str(p) for p in (folders.cache, folders.artifacts) if p is not None)
    limits = [
        f"at most {prune.shown(bound.max_bytes)}" if bound.max_bytes else "no size bound",
        f"the newest {bound.keep_sessions} session folders" if bound.keep_sessions else "every session folder",
    ] + ([f"nothing last used over {bound.older_than_days:g} days ago"] if bound.older_than_days else [])
    after = "would hold" if dry_run else "hold"
    out.append(
        f"{places}: {prune.shown(outcome.before)} before; {verb} {len(outcome.removed)} "
        f"({prune.shown(outcome.freed)}); {after} {prune.shown(outcome.after)} ({', '.join(limits)})"
        + ("; still above the bound: what is kept above could not go" if outcome.after > bound.max_bytes > 0 else "")
    )
    return out


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))
