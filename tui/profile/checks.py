"""Checks that span keys or look outside the document (files, URLs, environment-variable names):
what the per-field types and ranges cannot say alone."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import idna

from tui.profile.errors import ProfileError, fail
from tui.profile.schema import Profile
from tui.profile.searches import SweepConfig
from tui.profile.sections import BYTES_TOKENIZER, DefensesConfig, EngineConfig, LengthDist, TargetConfig


def check_dist(d: LengthDist, source: str, path: str) -> None:
    need = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma"), "mixture": ()}
    for key in need[d.dist]:
        if getattr(d, key) is None:
            raise ProfileError(f"{source}: {path} (dist = {d.dist!r}) is missing required key '{key}'")
    if d.dist == "uniform" and not (d.low <= d.high):  # type: ignore[operator]
        fail(source, f"{path}.low", d.low, f"1 <= low <= high (high = {d.high})")
    if d.dist == "mixture" and not d.components:
        fail(source, f"{path}.components", [], "at least one component")
    if d.max is not None and d.max < d.min:
        fail(source, f"{path}.min", d.min, f"min <= max (max = {d.max})")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(name: str, where: str) -> str:
    """``name`` if it is a valid environment-variable name, else a ProfileError that never shows it.

    Whatever was given where a variable NAME belongs may be the secret itself, so it is not echoed.
    """
    if not _ENV_NAME.fullmatch(name):
        raise ProfileError(
            f"{where}: expected the NAME of an environment variable (letters, digits and _, not starting "
            "with a digit), not the key itself; the value given is not shown"
        )
    return name


def check_base_url(url: str, where: str) -> str:
    """``url`` if it is an http(s) URL with a host and a valid port, else a one-line ProfileError."""
    problem = None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises ValueError for a port outside 0..65535 or not a number
        if parts.scheme not in ("http", "https"):
            problem = "an http:// or https:// URL"
        elif not parts.hostname:
            problem = "a URL with a host, such as http://127.0.0.1:8000/v1"
        elif port == 0:
            problem = "a port in 1..65535"
        elif not parts.hostname.isascii() or "xn--" in parts.hostname.lower():
            try:  # as the HTTP client will encode it (IDNA 2008), so a bad name fails here, in one line;
                # an ASCII name with a punycode label ("xn--a") is decoded too: httpx raised on it
                if parts.hostname.isascii():
                    idna.decode(parts.hostname)
                else:
                    idna.encode(parts.hostname)
            except (idna.IDNAError, UnicodeError) as e:
                problem = f"a valid internationalised host name ({str(e)[:80]})"
    except ValueError as e:
        problem = f"a well-formed http(s) URL ({e})"
    if problem:
        shown = url if len(url) <= 60 else url[:57] + "..."
        raise ProfileError(f"{where} = {shown!r}: expected {problem}")
    return url


def _is_dir(path: str) -> bool:
    """Whether ``path`` (``~`` expanded) is a directory; False, not an error, for ``~nosuchuser`` or a
    name too long: the caller's one line says what was expected."""
    try:
        return Path(path).expanduser().is_dir()
    except (RuntimeError, OSError, ValueError):
        return False


def _is_file(path: str) -> bool:
    try:
        return Path(path).expanduser().is_file()
    except (RuntimeError, OSError, ValueError):
        return False


# Engine keys only the simulated backend models: (key, the value every other backend needs, expected).
SIMULATED_ONLY: tuple[tuple[str, object, str], ...] = (
    ("tensor_parallel_size", 1, "1 (tensor parallelism is simulated only: set engine.backend = 'simulated')"),
    ("hardware", None, "no value unless engine.backend = 'simulated'"),
    ("stack", None, "no value unless engine.backend = 'simulated'"),
    ("quantization", None, "no value unless engine.backend = 'simulated' (the torch engine runs its checkpoint's dtype)"),
    ("kv_cache_dtype", "auto", "'auto' unless engine.backend = 'simulated'"),
)


def check_engine(e: EngineConfig, source: str) -> None:
    """An engine section's cross-key rules: simulated-only keys, and a checkpoint directory that exists."""
    if e.backend != "simulated":
        for key, needed, expected in SIMULATED_ONLY:
            if getattr(e, key) != needed:
                fail(source, f"engine.{key}", getattr(e, key), expected)
    if e.model_path is not None and not _is_dir(e.model_path):
        fail(source, "engine.model_path", e.model_path, "a local checkpoint directory (config.json, *.safetensors)")


def check_defenses(d: DefensesConfig, source: str) -> None:
    if (d.truncate_when_backlog_over is None) != (d.truncate_prompt_to is None):
        raise ProfileError(
            f"{source}: defenses.truncate_when_backlog_over and defenses.truncate_prompt_to go together; set both or neither"
        )


def check_profile(p: Profile, source: str) -> None:
    """The checks a whole profile needs beyond each field's type and range, section by section."""
    _check_target(p.target, source)
    check_engine(p.engine, source)
    check_defenses(p.defenses, source)
    _check_trace(p, source)
    _check_stages(p, source)
    if p.sweep is not None:
        _check_sweep(p, p.sweep, source)
    _check_decompose(p, source)
    _check_tune(p, source)


def _check_target(t: TargetConfig, source: str) -> None:
    if t.kind == "openai":
        if not t.base_url:
            raise ProfileError(f"{source}: target.base_url is required when target.kind = 'openai'")
        check_base_url(t.base_url, f"{source}: target.base_url")
        if not t.model:
            raise ProfileError(f"{source}: target.model is required when target.kind = 'openai'")
    if t.api_key_env is not None:
        check_env_name(t.api_key_env, f"{source}: target.api_key_env")
    if t.tokenizer is not None and t.tokenizer != BYTES_TOKENIZER and not (_is_file(t.tokenizer) or _is_file(str(Path(t.tokenizer) / "tokenizer.json"))):
        fail(source, "target.tokenizer", t.tokenizer, "a tokenizer.json, or a model directory holding one, "
             f"or {BYTES_TOKENIZER!r} (a kvtui serve on the byte tokenizer)")


def _check_stages(p: Profile, source: str) -> None:
    names: set[str] = set()
    for i, s in enumerate(p.stages):
        if s.num_requests is None and s.duration_s is None:
            raise ProfileError(f"{source}: stages[{i}] ({s.name!r}) needs num_requests or duration_s")
        if s.name in names:
            fail(source, f"stages[{i}].name", s.name, "a name no other stage has")
        names.add(s.name)
    if not p.record.modes:
        fail(source, "record.modes", [], "at least one mode")


def _check_decompose(p: Profile, source: str) -> None:
    if p.decompose is None:
        return
    if p.sweep is None:
        raise ProfileError(f"{source}: [decompose] needs a [sweep] section: its probe rules find each mode's edge")
    if not p.decompose.presets:
        fail(source, "decompose.presets", [], "at least one preset profile name")
    if 1.0 not in p.decompose.slo_ladder:
        fail(source, "decompose.slo_ladder", list(p.decompose.slo_ladder), "a list that includes 1 (the [slo] itself)")


def _check_tune(p: Profile, source: str) -> None:
    if p.tune is None:
        return
    if p.sweep is None:
        raise ProfileError(f"{source}: [tune] needs a [sweep] (and an [slo]): each candidate's capacity edge is "
                           "found by the sweep, whose probes the last rung uses")
    for name, price in p.tune.prices.items():
        if not price > 0:
            fail(source, f"tune.prices.{name}", price, "a price > 0 per GPU-hour")


def _check_trace(p: Profile, source: str) -> None:
    trace = p.workload.trace
    if trace is not None and not Path(trace).expanduser().is_file():
        fail(source, "workload.trace", trace, "a trace file (Mooncake JSONL, Azure/BurstGPT CSV, ShareGPT JSON)")
    if p.load.arrival == "trace" and trace is None:
        raise ProfileError(f"{source}: load.arrival = 'trace' replays workload.trace's arrival times; set workload.trace")
    if p.load.arrival == "trace" and p.workload.trace_format == "sharegpt":
        fail(source, "load.arrival", "trace", "poisson, gamma or constant (a ShareGPT file has no arrival times)")


def _check_sweep(p: Profile, sw: SweepConfig, source: str) -> None:
    if p.stages:
        raise ProfileError(f"{source}: [sweep] and [[stages]] exclude each other: a sweep makes its own stages "
                           "(sweep-01, sweep-02, ...); remove one of them")
    if p.slo.ttft_ms is None and p.slo.tpot_ms is None and p.slo.e2el_ms is None:
        raise ProfileError(f"{source}: [sweep] needs an [slo] target (slo.ttft_ms, slo.tpot_ms or slo.e2el_ms): "
                           "the capacity edge is where the share of requests meeting them falls below "
                           "sweep.target_attainment")
    if sw.max_rate is not None and sw.max_rate < sw.start_rate:
        fail(source, "sweep.max_rate", sw.max_rate, f"a rate >= sweep.start_rate ({sw.start_rate:g})")
    if p.record.repeats > 1:
        fail(source, "record.repeats", p.record.repeats, "1 with [sweep] (a sweep chooses its probes one by one; "
             "repeat a sweep as separate runs with --seed)")


