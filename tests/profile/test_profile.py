"""Profiles: defaults, every section, and one clear line for every kind of bad input."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.profile import (
    HEADLINE_MODES,
    RANGES,
    SHIPPED_DIR,
    DefensesConfig,
    EngineConfig,
    EngineMode,
    LengthDist,
    LoadConfig,
    Profile,
    ProfileError,
    Range,
    RecordConfig,
    SloConfig,
    Stage,
    TargetConfig,
    WorkloadConfig,
    dump_profile,
    engine_config_from_dict,
    load_profile,
    profile_from_dict,
    to_dict,
)

PROFILES = sorted(SHIPPED_DIR.glob("*.toml"))


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_every_shipped_profile_loads() -> None:
    names = {p.stem for p in PROFILES}
    assert {"baseline", "mid", "capacity-edge", "compare", "prefix-heavy", "remote-example"} <= names
    for path in PROFILES:
        prof = load_profile(path)
        assert prof.name == path.stem
        assert prof.run_stages()


def test_compare_profile_is_three_stages_by_the_headline_modes() -> None:
    prof = load_profile(SHIPPED_DIR / "compare.toml")
    assert [s.name for s in prof.stages] == ["baseline", "mid", "capacity-edge"]
    assert [s.rate for s in prof.stages] == sorted(s.rate for s in prof.stages)
    assert prof.record.modes == HEADLINE_MODES
    mix = prof.workload.output_len
    assert mix.dist == "mixture"
    assert [(c.weight, c.value) for c in mix.components] == [(0.8, 20), (0.2, 800)]


def test_defaults_are_the_builtin_profile() -> None:
    prof = profile_from_dict({})
    assert prof == Profile(source="<dict>")
    assert prof.target.kind == "local"
    assert prof.engine.block_size == 16
    assert prof.engine.mode == EngineMode("continuous", "paged")
    assert prof.defenses.backlog_limit is None and not prof.defenses.prefix_caching
    assert prof.load.arrival == "poisson" and prof.load.burstiness == 1.0


def test_every_section_parses(tmp_path: Path) -> None:
    prof = load_profile(write(tmp_path, """
name = "all"
[target]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_key_env = "MY_KEY"
endpoint = "chat"
[engine]
batching = "static"
kv = "contiguous"
block_size = 32
kv_budget_mb = 2.5
max_num_seqs = 4
max_num_batched_tokens = 256
enable_chunked_prefill = false
static_batch_size = 3
batch_wait_ms = 0
reservation = "pow2"
max_model_len = 512
seed = 3
[defenses]
backlog_limit = 10
truncate_when_backlog_over = 5
truncate_prompt_to = 64
wait_timeout_s = 2.5
prefix_caching = true
[workload]
prompt_len = { dist = "lognormal", median = 100, sigma = 0.5, max = 400 }
output_len = 7
shared_prefix_tokens = 32
shared_prefix_fraction = 0.5
seed = 9
[load]
arrival = "gamma"
burstiness = 0.25
rate = 3
max_concurrency = 8
duration_s = 10
warmup_requests = 1
[[stages]]
name = "a"
rate = 1
num_requests = 5
[record]
modes = ["static+paged", "continuous+contiguous"]
[slo]
ttft_ms = 100
"""))
    assert prof.target.endpoint == "chat" and prof.target.api_key_env == "MY_KEY"
    assert prof.engine.reservation == "pow2" and prof.engine.kv_budget_mb == 2.5
    assert prof.defenses.truncate_prompt_to == 64
    assert prof.workload.prompt_len == LengthDist(dist="lognormal", median=100.0, sigma=0.5, max=400)
    assert prof.workload.output_len == LengthDist(dist="fixed", value=7)
    assert prof.load.rate == 3.0 and isinstance(prof.load.rate, float)
    assert prof.record.modes == (EngineMode("static", "paged"), EngineMode("continuous", "contiguous"))
    assert prof.slo.ttft_ms == 100 and prof.slo.tpot_ms is None


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_dumped_profiles_load_back_equal(tmp_path: Path, path: Path) -> None:
    prof = load_profile(path)
    again = load_profile(write(tmp_path, dump_profile(prof)))
    assert again == dataclasses.replace(prof, source=again.source)


def test_dumping_only_the_engine_sections() -> None:
    odd = Profile(name='odd "name"', defenses=DefensesConfig(backlog_limit=5, wait_timeout_s=1.5))
    back = profile_from_dict(tomllib.loads(dump_profile(odd, sections=("name", "engine", "defenses"))))
    assert (back.name, back.engine, back.defenses, back.load) == (odd.name, odd.engine, odd.defenses, Profile().load)


def test_round_trips_through_plain_data() -> None:
    prof = load_profile(SHIPPED_DIR / "compare.toml")
    again = profile_from_dict({k: v for k, v in to_dict(prof).items() if k != "source"}, source=prof.source)
    assert again == prof


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[engine]\nblok_size = 16", "p.toml: unknown key 'engine.blok_size'; did you mean 'block_size'?"),
        ("[enigne]\nseed = 1", "unknown key 'enigne'; did you mean 'engine'?"),
        ("[engine]\nbatching = 'continous'", "engine.batching = 'continous': expected one of 'static', 'continuous' (did you mean 'continuous'?)"),
        ("[engine]\nblock_size = '16'", "engine.block_size = '16': expected an integer"),
        ("[engine]\nblock_size = 0", "engine.block_size = 0: expected an integer in [1, 1024]"),
        ("[engine]\nblock_size = 1000000000", "engine.block_size = 1000000000: expected an integer in [1, 1024]"),
        ("[engine]\nkv_budget_mb = inf", "engine.kv_budget_mb = inf: expected a finite number"),
        ("[engine]\nkv_budget_mb = 0.0", "engine.kv_budget_mb = 0.0: expected a finite number in (0, "),
        ("[engine]\nthreads = 100000", "engine.threads = 100000: expected an integer in [1, "),
        ("[load]\nrate = nan", "load.rate = nan: expected a finite number"),
        ("[load]\nrate = inf", "load.rate = inf: expected a finite number"),
        ("[load]\nrate = 1e308", "load.rate = 1e+308: expected a finite number in (0, 1000000]"),
        ("[load]\nduration_s = nan", "load.duration_s = nan: expected a finite number"),
        ("[load]\nburstiness = nan", "load.burstiness = nan: expected a finite number"),
        ("[record]\nwindow_s = inf", "record.window_s = inf: expected a finite number"),
        ("[target]\ntimeout_s = nan", "target.timeout_s = nan: expected a finite number"),
        ("[workload]\nseed = -1", "workload.seed = -1: expected an integer in [0, 9223372036854775807]"),
        ("[workload]\nprompt_len = 0", "workload.prompt_len = 0: expected an integer in [1, 1048576]"),
        ("[workload]\noutput_len = { dist = 'lognormal', median = 20, sigma = inf }", "workload.output_len.sigma = inf: expected a finite number"),
        ("[workload]\noutput_len = { dist = 'mixture', components = [{ value = 2, weight = nan }] }",
         "workload.output_len.components[0].weight = nan: expected a finite number"),
        ("[workload]\nshared_prefix_fraction = 1.5", "workload.shared_prefix_fraction = 1.5: expected a finite number in [0, 1]"),
        ("[engine]\nenable_chunked_prefill = 1", "engine.enable_chunked_prefill = 1: expected true or false"),
        ("[load]\nrate = -1", "load.rate = -1.0: expected a finite number in (0, 1000000]"),
        ("[workload]\nprompt_len = { dist = 'uniform', low = 9 }", "workload.prompt_len (dist = 'uniform') is missing required key 'high'"),
        ("[workload]\noutput_len = 'long'", "workload.output_len = 'long': expected an integer or a distribution table"),
        ("[record]\nmodes = ['static']", "record.modes[0] = 'static': expected batching+kv"),
        ("[[stages]]\nname = 'x'\nrate = 1", "stages[0] ('x') needs num_requests or duration_s"),
        ("[[stages]]\nrate = 1\nnum_requests = 2", "stages[0] is missing required key 'name'"),
        ("[target]\nkind = 'openai'\nmodel = 'm'", "target.base_url is required when target.kind = 'openai'"),
        ("[target]\napi_key_env = 'sk-abc123!'", "target.api_key_env: expected the NAME of an environment variable"),
        ("[target]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'http://[::1'", "target.base_url = 'http://[::1': expected a well-formed"),
        ("[target]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'http://h:99999'", "Port out of range"),
        ("[defenses]\ntruncate_prompt_to = 10", "set both or neither"),
        ("engine = 3", "engine = 3: expected a table"),
        ("[engine\n", "not valid TOML"),
    ],
)
def test_bad_input_gets_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(write(tmp_path, text))
    text_of = str(err.value)
    assert message in text_of
    assert "\n" not in text_of
    assert str(tmp_path / "p.toml") in text_of


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"nope\.toml: no such profile file"):
        load_profile(tmp_path / "nope.toml")


def test_engine_table_alone_validates_like_the_profile() -> None:
    assert engine_config_from_dict({"batching": "static", "kv": "contiguous"}).mode.label == "static+contiguous"
    with pytest.raises(ProfileError, match=r"engine\.max_num_seqs = -2"):
        engine_config_from_dict({"max_num_seqs": -2})


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("tensor_parallel_size", 2, "1 (tensor parallelism is simulated only"),
    ("hardware", "H100-SXM", "no value unless engine.backend = 'simulated'"),
    ("quantization", "fp8", "no value unless engine.backend = 'simulated' (the torch engine"),
    ("kv_cache_dtype", "fp8", "'auto' unless engine.backend = 'simulated'"),
])
def test_simulated_only_keys_are_refused_on_the_torch_backend(key: str, value: object, expected: str) -> None:
    with pytest.raises(ProfileError, match=rf"^<request>: engine\.{key} = {value!r}: expected {re.escape(expected)}"):
        engine_config_from_dict({key: value})
    assert getattr(engine_config_from_dict({"backend": "simulated", key: value}), key) == value


# Property: whatever a file holds, loading either succeeds or raises ProfileError; never anything else.
toml_scalars = st.one_of(
    st.integers(-5, 5000), st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(), st.text(max_size=8), st.lists(st.integers(0, 3), max_size=3),
)
keys = st.sampled_from(
    ["name", "engine", "load", "workload", "defenses", "target", "stages", "record", "slo", "rate",
     "block_size", "batching", "kv", "prompt_len", "output_len", "dist", "modes", "kind", "low", "high"]
)
toml_values = st.recursive(toml_scalars, lambda inner: st.dictionaries(keys, inner, max_size=4), max_leaves=12)


@pytest.mark.slow  # 150 generated documents
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, toml_values, max_size=5))
def test_malformed_documents_raise_only_profile_errors(doc: dict) -> None:
    try:
        profile_from_dict(doc, source="fuzz.toml")
    except ProfileError as e:
        assert str(e).startswith("fuzz.toml: ") and "\n" not in str(e)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_profile_errors(tmp_path_factory: pytest.TempPathFactory, blob: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "f.toml"
    path.write_bytes(blob)
    try:
        load_profile(path)
    except ProfileError as e:
        assert "\n" not in str(e)


def test_a_key_given_as_its_variable_name_is_never_echoed(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdef"
    with pytest.raises(ProfileError) as err:
        load_profile(write(tmp_path, f"[target]\napi_key_env = '{secret}'"))
    assert secret not in str(err.value) and "0123456789" not in str(err.value)


# Every numeric key of every section, by its dotted path in a document, with its declared Range.
def _numeric_keys() -> list[tuple[str, type, str, Range]]:
    sections = {"target": TargetConfig, "engine": EngineConfig, "defenses": DefensesConfig,
                "workload": WorkloadConfig, "load": LoadConfig, "record": RecordConfig, "slo": SloConfig}
    out = []
    for section, cls in sections.items():
        for name, rng in RANGES[cls].items():
            out.append((section, cls, name, rng))
    for name, rng in RANGES[Stage].items():
        out.append(("stages", Stage, name, rng))
    for name, rng in RANGES[LengthDist].items():
        out.append(("workload.output_len", LengthDist, name, rng))
    return out


NUMERIC_KEYS = _numeric_keys()


def test_every_numeric_field_declares_a_range() -> None:
    """A new number in a profile cannot slip past validation: it must say what range it accepts."""
    for cls in (TargetConfig, EngineConfig, DefensesConfig, LengthDist, WorkloadConfig, LoadConfig, Stage,
                RecordConfig, SloConfig):
        hints = typing.get_type_hints(cls)
        numeric = {f.name for f in dataclasses.fields(cls)
                   if {int, float} & set(typing.get_args(hints[f.name]) or (hints[f.name],))}
        assert numeric <= set(RANGES[cls]), f"{cls.__name__}: {sorted(numeric - set(RANGES[cls]))} have no range"


hostile_numbers = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -1.0, 0, 0.0, -0.0, 1e308, -1e308, 2**63, 2**64, 10**30,
                     -(2**63), 5e-324]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _document(section: str, name: str, value: object) -> dict:
    if section == "stages":
        return {"stages": [{"name": "s", "rate": 1.0, "num_requests": 3, name: value}]}
    if section == "workload.output_len":
        base: dict = {"dist": "lognormal", "median": 20.0, "sigma": 0.5, name: value}
        if name == "weight":
            base = {"dist": "mixture", "components": [{"value": 2, "weight": value}]}
        elif name in ("low", "high"):
            base = {"dist": "uniform", "low": 1, "high": 10, name: value}
        elif name == "value":
            base = {"dist": "fixed", "value": value}
        return {"workload": {"output_len": base}}
    doc: dict = {section: {name: value}}
    if section == "defenses" and name in ("truncate_when_backlog_over", "truncate_prompt_to"):
        doc["defenses"] = {"truncate_when_backlog_over": 1, "truncate_prompt_to": 1, name: value}
    return doc


@pytest.mark.slow  # 300 generated values
@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NUMERIC_KEYS), hostile_numbers)
def test_every_numeric_key_is_finite_and_in_range_or_one_clear_line(key: tuple, value: object) -> None:
    """NaN, infinities, huge and negative numbers at every numeric key: accepted only within the
    declared range, otherwise one line naming the key path and the value."""
    section, _cls, name, rng = key
    try:
        prof = profile_from_dict(_document(section, name, value), source="fuzz.toml")
    except ProfileError as e:
        text = str(e)
        assert text.startswith("fuzz.toml: ") and "\n" not in text
        assert f".{name}" in text or f"{section}." in text, text
        return
    got = {"stages": lambda p: p.stages[0], "workload.output_len": lambda p: p.workload.output_len}.get(
        section, lambda p: getattr(p, section))(prof)
    if name == "weight":
        got = got.components[0]
    v = getattr(got, name)
    assert math.isfinite(v) and rng.contains(v), (section, name, v)


@pytest.mark.parametrize(("section", "cls", "name", "rng"), NUMERIC_KEYS, ids=lambda x: x if isinstance(x, str) else "")
def test_non_finite_values_are_refused_at_every_key(section: str, cls: type, name: str, rng: Range) -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ProfileError, match=r"fuzz\.toml: .*(nan|inf).*expected"):
            profile_from_dict(_document(section, name, bad), source="fuzz.toml")
