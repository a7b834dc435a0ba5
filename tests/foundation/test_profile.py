"""Profiles: defaults, every section, and one clear line for every kind of bad input."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui.profile import (
    HEADLINE_MODES,
    SHIPPED_DIR,
    DefensesConfig,
    EngineMode,
    LengthDist,
    Profile,
    ProfileError,
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
        ("[engine]\nblock_size = 0", "engine.block_size = 0: expected a positive number"),
        ("[engine]\nenable_chunked_prefill = 1", "engine.enable_chunked_prefill = 1: expected true or false"),
        ("[load]\nrate = -1", "load.rate = -1.0: expected a positive number"),
        ("[workload]\nprompt_len = { dist = 'uniform', low = 9 }", "workload.prompt_len (dist = 'uniform') is missing required key 'high'"),
        ("[workload]\noutput_len = 'long'", "workload.output_len = 'long': expected an integer or a distribution table"),
        ("[record]\nmodes = ['static']", "record.modes[0] = 'static': expected batching+kv"),
        ("[[stages]]\nname = 'x'\nrate = 1", "stages[0] ('x') needs num_requests or duration_s"),
        ("[[stages]]\nrate = 1\nnum_requests = 2", "stages[0] is missing required key 'name'"),
        ("[target]\nkind = 'openai'\nmodel = 'm'", "target.base_url is required when target.kind = 'openai'"),
        ("[target]\napi_key_env = 'sk-abc123!'", "target.api_key_env = 'sk-abc123!': expected the NAME of an environment variable"),
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
