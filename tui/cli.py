"""The ``kvtui`` command: dashboard (default), ``--record``, ``serve`` and ``report``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from tui import __version__
from tui.profile import Profile, ProfileError, check_base_url, check_env_name, find_profile, load_profile

DESCRIPTION = """\
kvtui: see, and measure, what continuous batching and a paged KV cache buy over static batching.

modes:
  kvtui                           dashboard on the local engine (started on loopback for you)
  kvtui --target URL --model M    dashboard on any OpenAI-compatible endpoint
  kvtui --record --out DIR        headless: run every stage x mode of the profile, write Parquet
                                  records and the comparison table
  kvtui serve [--host H] [--port P]
                                  the local engine as an OpenAI-compatible server (+ /metrics)
  kvtui report DIR [DIR2]         print a recorded run's table again, or compare two runs
"""

EPILOG = """\
profiles: TOML files describing an experiment. --profile takes a file or the name of a shipped
profile (`kvtui profiles` lists them); without --profile the built-in defaults are used. API keys are never passed on the command line: name
the environment variable that holds one with --api-key-env (e.g. --api-key-env OPENAI_API_KEY).
"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME|FILE", help="shipped profile name (e.g. compare) or a TOML file; default: built-in")
    p.add_argument("--target", metavar="URL", help="base URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", metavar="NAME", help="model name to request from --target")
    p.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key (never the key itself)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtui",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kvtui {__version__}")
    _common(parser)
    parser.add_argument("--record", action="store_true", help="run headless and record (needs --out)")
    parser.add_argument("--out", metavar="DIR", type=Path, help="output directory for --record")
    sub = parser.add_subparsers(dest="command", metavar="{serve,report}")

    serve = sub.add_parser("serve", help="run the local engine as an OpenAI-compatible server")
    serve.add_argument("--profile", metavar="NAME|FILE", help="profile (name or file) whose [engine] and [defenses] to use")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; anything else is exposed)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--api-key-env", metavar="NAME", help="require the bearer token held in this environment variable")

    report = sub.add_parser("report", help="print the table of a recorded run, or compare two")
    report.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="one run directory, or two to compare")
    return parser


def resolve_profile(args: argparse.Namespace) -> Profile:
    """The profile named by --profile (or the built-in one), with command-line overrides applied."""
    prof = load_profile(find_profile(args.profile)) if args.profile else Profile()
    target = prof.target
    if getattr(args, "target", None):
        check_base_url(args.target, "--target")
        target = dataclasses.replace(target, kind="openai", base_url=args.target)
    if getattr(args, "model", None):
        target = dataclasses.replace(target, model=args.model)
    if getattr(args, "api_key_env", None):
        name = check_env_name(args.api_key_env, "--api-key-env")
        target = dataclasses.replace(target, api_key_env=name)
    if target.kind == "openai" and not target.model:
        raise ProfileError("--target needs --model NAME (the model the endpoint serves)")
    return dataclasses.replace(prof, target=target)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvtui`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            from tui.metrics.report import report_main

            return report_main(args.dirs)
        if args.command == "serve":
            from tui.serve.app import serve_main

            prof = load_profile(find_profile(args.profile)) if args.profile else Profile()
            return serve_main(prof, host=args.host, port=args.port, api_key_env=args.api_key_env)
        prof = resolve_profile(args)
        if args.record:
            if args.out is None:
                parser.error("--record needs --out DIR")
            from tui.load.record import record_main

            return record_main(prof, args.out)
        if args.out is not None:
            parser.error("--out is only used with --record")
        from tui.ui.app import dashboard_main

        return dashboard_main(prof)
    except ProfileError as e:
        print(f"kvtui: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

