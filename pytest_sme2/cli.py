"""The ``pytest-sme2`` command. Exit codes: 0 ok, 1 the command failed, 2 bad usage."""

from __future__ import annotations

import argparse
import sys

from .errors import Sme2Error, UsageError


def _build_runner(args: argparse.Namespace) -> int:
    from .native.build import build_mask_library, build_runner

    runner = build_runner(args.arch, force=args.force)
    print(f"runner: {runner}")
    if args.mask:
        print(f"SME2-masking preload library: {build_mask_library(args.arch, force=args.force)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest-sme2", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build-runner", help="build (or reuse) the native runner for a target architecture")
    build.add_argument("--arch", default="host", choices=("host", "linux-aarch64"),
                       help="host (default), or linux-aarch64 (cross build against the aarch64 executorch wheel)")
    build.add_argument("--force", action="store_true", help="rebuild even if a cached build exists")
    build.add_argument("--no-mask", dest="mask", action="store_false",
                       help="skip the SME2-masking preload library (Linux)")
    build.set_defaults(handler=_build_runner)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"pytest-sme2 {args.command}: {exc}", file=sys.stderr)
        return 2
    except Sme2Error as exc:
        print(f"pytest-sme2 {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
