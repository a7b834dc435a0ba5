"""The ``kvtui`` command: dashboard (default), ``--record``, ``serve``, ``report`` and ``profiles``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from tui import __version__
from tui.base.errors import one_line
from tui.profile import (
    MAX_SEED,
    EngineMode,
    Profile,
    ProfileError,
    apply_overrides,
    check_base_url,
    check_env_name,
    dump_profile,
    find_profile,
    load_profile,
    shipped_profiles,
)

DESCRIPTION = """\
kvtui: see, and measure, what continuous batching and a paged KV cache buy over static batching.

modes:
  kvtui                           dashboard on the local engine (started on loopback for you)
  kvtui --target URL --model M    dashboard on any OpenAI-compatible endpoint
  kvtui --record --out DIR        headless: run every stage x mode of the profile, write Parquet
                                  records and the comparison table
  kvtui --record --profile sweep --out DIR
                                  headless: find each mode's capacity edge (the highest rate at
                                  which the [slo] still holds for 90% of requests); prints the edges
  kvtui serve [--host H] [--port P]
                                  the local engine as an OpenAI-compatible server (+ /metrics)
  kvtui report DIR [DIR2 ...]     review recorded runs in the terminal: the table, latency against
                                  offered load, each cell over time (--table, or a pipe: print the table)
  kvtui report DIR [DIR2 ...] --html FILE
                                  one self-contained HTML page of charts (runs overlaid), each chart
                                  also as SVG and PNG in FILE-charts/ (or --charts-dir DIR)
  kvtui report DIR --replay       play a recorded run's scheduler back (keys: space, ← →, [ ], n N, c)
  kvtui calibrate --target URL --model M --gpu G   probe a running server; write a stack file
  kvtui calibrate [--out FILE]    measure the torch engine here and write a hardware profile for the
                                  simulated backend (engine.backend = "simulated")
  kvtui tune --profile tune --out DIR
                                  search the engine settings in the profile's [tune] for the highest
                                  capacity edge at the SLO, and its cost per million output tokens
                                  (--executor ray for a Ray cluster); writes DIR/tune.csv
  kvtui profiles [show NAME]      list the shipped profiles, or print one with defaults filled in
"""

EPILOG = """\
profiles: a TOML file describes an experiment. --profile takes the name of a shipped profile
(`kvtui profiles` lists them) or a path to a file (a path that exists wins); without --profile the
built-in defaults are used. --set KEY=VALUE (repeatable) overrides any key by its dotted path, the
value written as in TOML; arrays are indexed from 0:
  kvtui --record --profile compare --set stages.0.rate=2 --set 'record.modes=["continuous+paged"]' --out runs/x
  kvtui --profile baseline --rate 8 --set engine.batching=static
--rate, --num-requests and --duration are short for --set load.rate / load.num_requests /
load.duration_s (for a profile with [[stages]], --num-requests and --duration set every stage's;
with [sweep], every probe's).
traces: [workload] trace = "FILE" replays a Mooncake JSONL, Azure or BurstGPT CSV, or ShareGPT JSON
trace's request lengths; [load] arrival = "trace" its arrival times too (load.time_scale stretches them,
load.rescale_trace = true rescales them to load.rate); --num-requests N takes its first N. See docs/traces.md.
--repeat N records every cell N times with seeds 0..N-1; the table shows mean ± 95% CI.
--seed N sets load.seed and workload.seed: the same seed draws the same arrivals and requests on every
run (the table's offered/s is the rate that draw offered); repeat a measurement with --seed 1, --seed 2,
... or --seed random (the seed drawn is printed and recorded, so the run can still be repeated).
sweep: a profile's [sweep] section probes each mode at growing rates until the share of requests
meeting every [slo] target falls below target_attainment (default 0.9), then bisects to tolerance
(default 0.1, relative); keys and defaults: start_rate 1.0, growth 2.0, max_probes 12 per mode,
max_rate (none); each probe sends max(num_requests, rate x duration_s) requests (defaults 100, 30 s).
Each probe is a stage (sweep-01, ...); sweep.json in the run directory holds each mode's probes and edge.
A recorded run's profile.toml has the overrides applied: --profile RUN_DIR repeats the run.
API keys are never passed on the command line: name the environment variable that holds one with
--api-key-env (e.g. --api-key-env OPENAI_API_KEY).
"""

# The short flags and the profile key each one sets (through the same path as --set).
ALIASES = {"rate": "load.rate", "num_requests": "load.num_requests", "duration": "load.duration_s",
           "workers": "load.workers"}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME|FILE", help="shipped profile name (e.g. compare), a TOML file, or a recorded run's directory; default: built-in")
    p.add_argument("--target", metavar="URL", help="base URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", metavar="NAME", help="model name to request from --target")
    p.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key (never the key itself)")
    _set_option(p)
    _checkpoint_options(p)
    p.add_argument("--rate", metavar="REQ/S", help="arrival rate in requests/s (= --set load.rate=REQ/S)")
    p.add_argument("--num-requests", metavar="N", help="requests to send with --record (= --set load.num_requests=N)")
    p.add_argument("--duration", metavar="SECONDS", help="how long to send with --record (= --set load.duration_s=SECONDS)")
    p.add_argument("--seed", metavar="N|random",
                   help="seed of the arrival times and the request contents (= --set load.seed=N --set workload.seed=N); "
                        "'random' draws one, says which and records it in the run's profile.toml and run.json")
    p.add_argument("--repeat", metavar="N",
                   help="with --record: record every cell N times, seeded 0..N-1 (arrivals and workload); the table "
                        "shows each figure's mean ± its 95%% confidence interval (= --set record.repeats=N)")
    p.add_argument("--workers", metavar="N",
                   help="with --record: load-client processes sharing ONE arrival schedule, each sending every N-th "
                        "request, for rates one client process cannot keep up with (= --set load.workers=N; default 1)")


def _checkpoint_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-path", metavar="DIR", help="a local Hugging Face checkpoint for the local engine (= --set engine.model_path=DIR)")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="the name the local engine serves (default: org/name from the Hugging Face cache layout, else the directory's name)")


def with_checkpoint(args: argparse.Namespace, prof: Profile, *, local: bool) -> Profile:
    """``--model-path`` / ``--served-model-name`` applied; a local engine's checkpoint is checked here, before
    anything starts, so a missing or malformed file exits 2 with one line (a CheckpointError is a ProfileError)."""
    engine = prof.engine
    if args.model_path:
        engine = dataclasses.replace(engine, model_path=args.model_path)
    if args.served_model_name:
        engine = dataclasses.replace(engine, served_model_name=args.served_model_name)
    if local and engine.model_path:
        from tui.engine.checkpoint import check_checkpoint

        check_checkpoint(engine.model_path)
    return dataclasses.replace(prof, engine=engine)


def _set_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override a profile key by dotted path, e.g. load.rate=8 or stages.0.num_requests=20 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtui",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # no abbreviations: this parser reads every argument first, so a subcommand's own option that
        # prefixes two of its options (verify --mode: --model, --model-path) was refused as ambiguous
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"kvtui {__version__}")
    _common(parser)
    parser.add_argument("--record", action="store_true", help="run headless and record (needs --out)")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="output directory for --record: new or empty (a non-empty one is refused)")
    parser.add_argument("--force", action="store_true",
                        help="with --record: replace the run already in --out (only the files a run writes are removed)")
    parser.add_argument("--real-time", action="store_true",
                        help="with --record and a simulated engine: run it behind the server in real time "
                             "(default: on the virtual clock, no HTTP)")
    sub = parser.add_subparsers(dest="command", metavar="{serve,report,profiles,calibrate,verify,tune}")

    serve = sub.add_parser("serve", help="run the local engine as an OpenAI-compatible server")
    serve.add_argument("--profile", metavar="NAME|FILE", help="profile (name or file) whose [engine] and [defenses] to use")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; anything else is exposed)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--api-key-env", metavar="NAME", help="require the bearer token held in this environment variable")
    serve.add_argument("--strict-fields", action="store_true",
                       help="refuse request fields this server ignores or does not know (default: ignore them, as vLLM does)")
    _checkpoint_options(serve)
    _set_option(serve)

    report = sub.add_parser("report", help="review recorded runs: table, load curves, time series (or print the table)")
    report.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="one run directory, or several to compare")
    report.add_argument("--table", action="store_true",
                        help="print the table instead of opening the review (the default when stdout is not a terminal)")
    report.add_argument("--wide", action="store_true",
                        help="with --table: every column in one table even on a narrow terminal (a pipe always gets it)")
    report.add_argument("--html", type=Path, metavar="FILE",
                        help="write a self-contained HTML report with charts (runs overlaid) to FILE")
    report.add_argument("--charts-dir", type=Path, metavar="DIR",
                        help="with --html: where each chart goes as SVG and PNG (default: FILE's name + -charts)")
    report.add_argument("--replay", action="store_true",
                        help="play the run's recorded scheduler states back in the dashboard's panes")

    profiles = sub.add_parser("profiles", help="list the shipped profiles; `profiles show NAME` prints one in full",
                              description="List the shipped profiles (name and description); `show NAME` prints one.")
    show_sub = profiles.add_subparsers(dest="profiles_command", metavar="{show}")
    show = show_sub.add_parser("show", help="print a profile as TOML with every default filled in")
    show.add_argument("name", metavar="NAME|FILE", help="a shipped profile's name, or a profile file")
    _set_option(show)

    cal = sub.add_parser("calibrate", help="measure the torch engine here; write a hardware profile for the simulated backend")
    cal.add_argument("--profile", metavar="NAME|FILE", help="profile whose [engine] (model, device, threads) to measure")
    cal.add_argument("--out", metavar="FILE", type=Path,
                     help="where to write the hardware profile (default calibrated-hardware.toml), or with "
                          "--target / --from the stack file (default stack.toml)")
    cal.add_argument("--quick", action="store_true", help="a smaller grid of steps (about a quarter of the time)")
    cal.add_argument("--cpu-time", action="store_true", help="time a CPU engine's steps by process CPU time "
                     "(an idle machine's speed) instead of the wall clock the server will see")
    where = cal.add_mutually_exclusive_group()
    where.add_argument("--target", metavar="URL", help="probe this running OpenAI-compatible server instead "
                       "(its API only) and write a stack file for the simulated engine")
    where.add_argument("--from", dest="from_file", metavar="FILE", type=Path,
                       help="fit a stack file to a CSV of your own measurements (kind,batch,prompt,output,seconds) "
                            "or a run directory recorded against the server (kvtui --record)")
    cal.add_argument("--model", help="with --target/--from: the served model's shape, a simulated preset or its config.json")
    cal.add_argument("--gpu", default="H100-SXM", help="with --target/--from: the GPU preset it runs on (default H100-SXM)")
    cal.add_argument("--tp", type=int, default=1, help="with --target/--from: tensor-parallel devices (default 1)")
    cal.add_argument("--stack", default="vllm", help="with --target/--from: the stack preset to start from (default vllm)")
    cal.add_argument("--serving-path", choices=("beside", "step"), default="beside",
                     help="with --target/--from: where the server's serving path (HTTP, tokenizer) runs: beside "
                          "the engine's steps in its own process (default: kvtui serve, vLLM V1, SGLang; a request "
                          "reaches the engine that long after it arrives) or in the step that starts requests "
                          "(vLLM V0's synchronous loop; it also delays that step's decodes)")
    cal.add_argument("--served-model", help="with --target: the model name to ask for (default: the server's first)")
    cal.add_argument("--api-key-env", metavar="NAME", help="with --target: the bearer token's environment variable")
    cal.add_argument("--budget-s", type=float, default=300.0, help="with --target: stop starting probes after this long")
    cal.add_argument("--max-prompt", type=int, default=1024, help="with --target: the longest probe prompt, in tokens")
    cal.add_argument("--repeats", type=int, default=3,
                     help="with --target: runs of each shape, interleaved across the probe (default 3; more on a "
                          "server whose load moves)")
    _set_option(cal)

    ver = sub.add_parser("verify", help="predict a server's capacity edge on the calibrated simulated engine, then measure it",
                         description="Per mode, run the profile's [sweep] on the simulated engine (the profile's "
                                     "[engine] = the server's settings, under --stack on --gpu) and then against the "
                                     "server; print the predicted and measured capacity edge side by side, one row per "
                                     "mode. A kvtui serve is switched into each mode of [record] modes (its control "
                                     "API); any other server is verified in the one mode it runs. Writes "
                                     "DIR/MODE/predicted and DIR/MODE/measured (run directories).")
    ver.add_argument("--target", metavar="URL", required=True, help="the running OpenAI-compatible server")
    ver.add_argument("--profile", metavar="NAME|FILE", required=True, help="the server's [engine] and the test's [sweep]")
    ver.add_argument("--stack", required=True, help="the stack file kvtui calibrate --target wrote (or a preset)")
    ver.add_argument("--gpu", default="H100-SXM", help="the GPU preset the stack was fitted on (default H100-SXM)")
    ver.add_argument("--tp", type=int, default=1, help="tensor-parallel devices (default 1)")
    ver.add_argument("--mode", help="the modes, comma-separated (a kvtui serve: default [record] modes; another server: the one it runs, default the profile's engine's)")
    ver.add_argument("--served-model", help="the model name to ask for")
    ver.add_argument("--api-key-env", metavar="NAME", help="the bearer token's environment variable")
    ver.add_argument("--tokenizer", help="what sizes prompts at the server: a tokenizer.json, or 'bytes' (a kvtui serve)")
    ver.add_argument("--out", metavar="DIR", type=Path, required=True, help="where the two runs go")
    _set_option(ver)

    tune = sub.add_parser(
        "tune", help="search engine settings for the highest capacity edge at the SLO, and its cost",
        description="Search the engine settings a profile's [tune] lists (successive halving: every candidate's "
                    "capacity edge swept with short probes, the best 1/reduction again with longer ones), rank them "
                    "by the sweep's capacity edge at the profile's [slo] and by cost per million output tokens "
                    "([tune.prices], per GPU-hour). Writes DIR/tune.csv, DIR/tune.json and each candidate's runs "
                    "under DIR/runs/ (ordinary run directories: kvtui report opens them).")
    tune.add_argument("--profile", metavar="NAME|FILE", required=True, help="a profile with [tune] and [sweep], e.g. tune")
    tune.add_argument("--out", metavar="DIR", type=Path, required=True, help="where tune.csv and the candidates' runs go")
    tune.add_argument("--executor", choices=("local", "ray"), default="local",
                      help="local worker processes (default) or Ray (pip install 'kvtui[ray]')")
    tune.add_argument("--workers", type=int, metavar="N",
                      help="trials at once (default: every core; 1 on the torch engine, which runs in real time)")
    tune.add_argument("--ray-address", metavar="ADDR", help="with --executor ray: an existing cluster (default: a local Ray)")
    tune.add_argument("--seed", type=int, metavar="N", help="the seed that draws the candidates (= --set tune.seed=N)")
    _set_option(tune)
    return parser


def check_backend(prof: Profile) -> Profile:
    """A simulated engine's model, hardware and memory checked up front (a ProfileError, exit 2)."""
    if prof.engine.backend == "simulated":
        from tui.engine.sim.sizing import validate

        validate(prof.engine, prof.source)
    return prof


def load_named_profile(ref: str | None, overrides: Sequence[str] = ()) -> Profile:
    """The profile ``--profile`` names (a path, or a shipped name; the built-in one if None), overridden."""
    prof = load_profile(find_profile(ref)) if ref else Profile()
    return apply_overrides(prof, overrides)


def alias_overrides(args: argparse.Namespace, prof: Profile) -> list[str]:
    """``--rate``/``--num-requests``/``--duration``/``--workers`` as ``--set`` items (``--workers`` is always
    ``load.workers``: one client layout for the whole run).

    A profile with ``[[stages]]`` records those, not ``[load]``: there --num-requests and --duration set
    every stage's, and --rate (one rate for every stage would defeat the stages) is refused for --record.
    A profile with ``[sweep]`` likewise: they set every probe's length, and the sweep chooses the rates.
    """
    items = []
    for dest, key in ALIASES.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        field = key.split(".")[1]
        if prof.sweep is not None and getattr(args, "record", False) and dest != "workers":  # every probe's length
            if dest == "rate":
                raise ProfileError(
                    f"--rate sets load.rate, but profile {prof.name!r} sweeps the rate ([sweep]); set where it "
                    "starts with --set sweep.start_rate=RATE")
            items.append(f"sweep.{field}={value}")
        elif prof.stages and getattr(args, "record", False) and dest != "workers":  # workers: one for all stages
            if dest == "rate":
                raise ProfileError(
                    f"--rate sets load.rate, but profile {prof.name!r} records its [[stages]], each at its own rate; "
                    "set one with --set stages.0.rate=RATE")
            items += [f"stages.{i}.{field}={value}" for i in range(len(prof.stages))]
        else:
            items.append(f"{key}={value}")
    return items


SEED_KEYS = ("load.seed", "workload.seed")
RANDOM_SEED_BELOW = 2**31  # a drawn seed short enough to read back and retype


def seed_overrides(seed: str | None) -> tuple[list[str], int | None]:
    """``--seed N|random`` as ``--set`` items for every seeded key, and the seed when it was drawn.

    vLLM's ``bench serve --seed`` and guidellm's ``--random-seed`` likewise seed the arrivals and the
    request contents together. ``random`` draws from the operating system's entropy.
    """
    if seed is None:
        return [], None
    drawn = None
    if seed.strip().lower() == "random":
        drawn = secrets.randbelow(RANDOM_SEED_BELOW)
        value = drawn
    else:
        try:
            value = int(seed)
        except ValueError:
            value = -1
        if not 0 <= value <= MAX_SEED:
            raise ProfileError(f"--seed = {seed!r}: expected an integer in [0, {MAX_SEED}] or 'random'")
    return [f"{key}={value}" for key in SEED_KEYS], drawn


def print_profiles() -> int:
    """``kvtui profiles``: every shipped profile's name and one-line description."""
    shipped = {name: load_profile(path) for name, path in shipped_profiles().items()}
    width = max(map(len, shipped), default=0)
    # on a terminal the descriptions wrap between words under their column (the terminal's own wrap
    # cut them mid-word at 80 columns); into a pipe, one line per profile for grep and head
    columns = shutil.get_terminal_size().columns if sys.stdout.isatty() else 0
    for name, prof in shipped.items():
        if columns > width + 20:
            lines = textwrap.wrap(prof.description, columns - width - 3) or [""]
            print(f"{name:<{width}}  {lines[0]}")
            for line in lines[1:]:
                print(f"{'':<{width}}  {line}")
        else:
            print(f"{name:<{width}}  {prof.description}")
    print("\nuse: kvtui --profile NAME ...   see one in full: kvtui profiles show NAME")
    return 0


def resolve_profile(args: argparse.Namespace) -> Profile:
    """The profile named by --profile (or the built-in one), with command-line overrides applied."""
    prof = load_named_profile(args.profile)
    seeds, drawn = seed_overrides(getattr(args, "seed", None))
    if drawn is not None:
        print(f"kvtui: --seed random drew seed {drawn} (repeat this run with --seed {drawn})", file=sys.stderr)
        args.seed_drawn = drawn
    repeat = [f"record.repeats={args.repeat}"] if getattr(args, "repeat", None) is not None else []
    prof = apply_overrides(prof, [*alias_overrides(args, prof), *seeds, *repeat, *getattr(args, "overrides", [])])
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


def replay_cli(dirs: list[Path]) -> int:
    """``kvtui report DIR --replay``: one run; a run without frames is one line and exit 1."""
    from tui.records.parquet import DamagedRecords
    from tui.ui.replay import ReplayError
    from tui.ui.replay_app import replay_main

    if len(dirs) != 1:
        print("kvtui report --replay: give one run directory", file=sys.stderr)
        return 2
    try:
        return replay_main(dirs[0])
    except (ReplayError, DamagedRecords) as e:
        print(f"kvtui report --replay: {e}", file=sys.stderr)
        return 1


def honour_ctrl_c() -> None:
    """Make Ctrl-C (SIGINT) a KeyboardInterrupt from the first moment, even where kvtui was started
    with it ignored.

    Why: a script's background job starts with SIGINT ignored, and Python then leaves it ignored; the
    recorder only took it over once its modules were imported and the run began, so from a script
    SIGINT did nothing for the first 8.4-9.3 s (importing torch and the stack on a busy machine)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        with contextlib.suppress(ValueError):  # main() called off the main thread (an embedding app)
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _print_anything() -> None:
    """Text that cannot be encoded (a lone surrogate from a damaged run.json or a trace) is printed
    escaped, not a UnicodeEncodeError traceback from deep inside rich."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # absent on a replaced stream (a test's capture)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def _calibrate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``kvtui calibrate``: the torch engine here, or a running server (--target), or a CSV (--from)."""
    from tui.recorder import calibrate as cal

    if args.target is None and args.from_file is None:
        return cal.calibrate_main(load_named_profile(args.profile, args.overrides),
                                  args.out or Path("calibrated-hardware.toml"), quick=args.quick, cpu_time=args.cpu_time)
    if not args.model:
        parser.error("--target / --from need --model (a simulated preset or the model's config.json)")
    out = args.out or Path("stack.toml")
    if args.from_file is not None:
        return cal.calibrate_from_main(args.from_file, args.model, args.gpu, args.tp, args.stack, out,
                                       serving_in_step=args.serving_path == "step")
    from tui.recorder.probe import ProbePlan

    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    top = max(8, args.max_prompt)
    plan = ProbePlan(prompts=tuple(sorted({min(32, top), min(256, top), top})), mid_prompt=min(256, top),
                     repeats=args.repeats, budget_s=args.budget_s)
    return cal.calibrate_target_main(args.target, args.model, args.gpu, args.tp, args.stack, out, args.served_model,
                                     args.api_key_env, plan, serving_in_step=args.serving_path == "step")


def _verify(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``kvtui verify``: predicted against measured capacity edge of a running server."""
    from tui.recorder.verify import verify_main

    try:
        modes = tuple(EngineMode.parse(m.strip()) for m in args.mode.split(",")) if args.mode else ()
    except ValueError as e:
        raise ProfileError(f"--mode: {e}") from None
    return verify_main(load_named_profile(args.profile, args.overrides), args.target, args.stack, args.gpu,
                       args.out, modes, args.served_model, args.api_key_env, args.tp, args.tokenizer)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvtui`` console script; returns the exit code."""
    honour_ctrl_c()
    _print_anything()
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, so a reader that left is caught below
        return code
    except BrokenPipeError:
        # `kvtui profiles | head -1`: the reader left, which is no error of ours. Point stdout at
        # /dev/null so the interpreter's own flush at exit does not print a traceback either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception as e:  # a bug, or an input no check foresaw: one line, never a traceback
        if os.environ.get("KVTUI_TRACEBACK"):
            raise
        print(f"kvtui: internal error: {type(e).__name__}: {one_line(e, 300)} (run again with KVTUI_TRACEBACK=1 "
              "for the traceback, and report it)", file=sys.stderr)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        command = _COMMANDS.get(args.command, _run)
        return command(args, parser)
    except ProfileError as e:
        print(f"kvtui: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``kvtui report``: the replay, the HTML page, the printed table, or the review app."""
    if args.replay:
        return replay_cli(args.dirs)
    if args.html is not None:
        from tui.report.page import html_main

        return html_main(args.dirs, args.html, args.charts_dir)
    if args.table or args.wide or not sys.stdout.isatty():  # pipes and scripts get the printed table
        from tui.report.terminal import report_main

        return report_main(args.dirs, wide=args.wide)
    from tui.ui.report_app import report_app_main

    return report_app_main(args.dirs)


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tui.serve.app import serve_main

    prof = check_backend(with_checkpoint(args, load_named_profile(args.profile, args.overrides), local=True))
    return serve_main(prof, host=args.host, port=args.port, api_key_env=args.api_key_env,
                      strict_fields=args.strict_fields)


def _tune(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tui.tune.main import tune_main

    if args.workers is not None and args.workers < 1:
        raise ProfileError(f"--workers = {args.workers}: expected a number of processes >= 1")
    seed = [f"tune.seed={args.seed}"] if args.seed is not None else []
    prof = check_backend(load_named_profile(args.profile, [*args.overrides, *seed]))
    return tune_main(prof, args.out, executor=args.executor, workers=args.workers, ray_address=args.ray_address)


def _profiles(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.profiles_command == "show":
        print(dump_profile(load_named_profile(args.name, args.overrides)), end="")
        return 0
    return print_profiles()


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``kvtui`` itself: the dashboard, or with ``--record`` a recorded run."""
    if not args.record and (args.num_requests is not None or args.duration is not None):
        parser.error("--num-requests and --duration are only used with --record")
    if not args.record and args.repeat is not None:
        parser.error("--repeat is only used with --record")
    prof = resolve_profile(args)
    prof = with_checkpoint(args, prof, local=prof.target.kind == "local")
    if prof.workload.trace is not None:  # checked whole before anything starts: a bad record is exit 2
        prof = _read_trace(prof)
    if prof.target.kind == "local":
        check_backend(prof)
    if args.record:
        return _record(args, parser, prof)
    if args.real_time:
        parser.error("--real-time is only used with --record (the dashboard always runs in real time)")
    if args.out is not None:
        parser.error("--out is only used with --record")
    if args.force:
        parser.error("--force is only used with --record")
    from tui.ui.app import dashboard_main

    return dashboard_main(prof)


def _read_trace(prof: Profile) -> Profile:
    """The profile with its workload's trace read (lengths, and arrivals where it replays them)."""
    from tui.load.trace_replay import resolve_trace

    print(f"kvtui: reading the trace {prof.workload.trace} ...", file=sys.stderr, flush=True)
    prof = resolve_trace(prof)
    load = prof.load
    played = f"{load.num_requests} requests" if load.num_requests is not None else f"{load.duration_s:g} s"
    pace = (f" at its own pace (mean {load.rate:.3g} req/s)" if load.arrival == "trace" and not load.rescale_trace
            else "")
    print(f"kvtui: replaying {played} of it{pace}", file=sys.stderr)
    return prof


def _record(args: argparse.Namespace, parser: argparse.ArgumentParser, prof: Profile) -> int:
    """``kvtui --record``: a decomposition, a run on the virtual clock, or one in real time."""
    if args.out is None:
        parser.error("--record needs --out DIR")
    seed_drawn = getattr(args, "seed_drawn", None) is not None
    if prof.decompose is not None:
        if args.real_time:
            parser.error("--real-time: a [decompose] profile runs on the virtual clock only")
        from tui.recorder.decompose import record_decompose

        return record_decompose(prof, args.out, seed_drawn=seed_drawn)
    if prof.target.kind == "local" and prof.engine.backend == "simulated" and not args.real_time:
        from tui.recorder.virtual import record_virtual

        return record_virtual(prof, args.out, seed_drawn=seed_drawn, force=args.force)
    from tui.recorder.recorder import record_main

    return record_main(prof, args.out, seed_drawn=seed_drawn, force=args.force)


# The subcommands; no subcommand is the dashboard or a recorded run (_run).
_COMMANDS: dict[str | None, Callable[[argparse.Namespace, argparse.ArgumentParser], int]] = {
    "report": _report, "serve": _serve, "calibrate": _calibrate, "verify": _verify, "tune": _tune,
    "profiles": _profiles,
}

