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


def _setup_emulation(args: argparse.Namespace) -> int:
    from . import emulation

    status = emulation.setup(force=args.force)
    print(f"qemu-aarch64: {status.qemu} ({status.version or '?'})")
    print(f"aarch64 runner: {status.runner}")
    if not status.ready:
        print(f"not ready: {status.problem}", file=sys.stderr)
        return 1
    print("emulated SME2 target ready: qemu -cpu max reports SME2")
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
    emulate = commands.add_parser(
        "setup-emulation",
        help="fetch qemu-user 11.1 from Debian (no root, system apt sources untouched), install the aarch64 "
             "cross compiler (as root) and build the aarch64 runner",
    )
    emulate.add_argument("--force", action="store_true", help="fetch and rebuild even if cached")
    emulate.set_defaults(handler=_setup_emulation)
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
