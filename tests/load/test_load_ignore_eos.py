"""``target.ignore_eos``: vLLM's extension parameter, sent so output lengths are what the workload asked for.

Sent to the local engine by default, to any other server only when asked for (a server that does not
know it refuses the request); on the real local server it reaches the engine's SamplingParams.
"""

from __future__ import annotations

import pytest
from loadfake_server import FakeConfig

from tui.base.clock import now
from tui.load.load_runner import make_target
from tui.load.target import PreflightError
from tui.load.workload import RequestSpec
from tui.profile import EngineConfig, Profile, ProfileError, TargetConfig, apply_overrides, profile_from_dict
from tui.records.request import RequestRecord

OPENAI_KEYS = ("model", "prompt", "messages", "max_tokens", "temperature", "stream", "stream_options")


def _remote(base_url: str, ignore_eos: bool | None = None, model: str = "fake-model") -> Profile:
    return Profile(target=TargetConfig(kind="openai", base_url=base_url, model=model, ignore_eos=ignore_eos))


def test_ignore_eos_is_sent_to_the_local_engine_by_default_and_to_a_remote_server_when_asked():
    spec = RequestSpec(0, "hi", 2, 8, False)
    assert make_target(Profile()).body(spec)["ignore_eos"] is True  # the local engine knows it
    assert "ignore_eos" not in make_target(_remote("http://127.0.0.1:9/v1")).body(spec)
    assert make_target(_remote("http://127.0.0.1:9/v1", True)).body(spec)["ignore_eos"] is True
    local_off = Profile(target=TargetConfig(ignore_eos=False))
    assert "ignore_eos" not in make_target(local_off).body(spec)
    chat = Profile(target=TargetConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", endpoint="chat",
                                       ignore_eos=True))
    assert make_target(chat).body(spec)["ignore_eos"] is True  # top level of the body, as vLLM reads it


def test_ignore_eos_is_a_profile_key_and_a_set_override():
    prof = profile_from_dict({"target": {"kind": "openai", "base_url": "http://h:1/v1", "model": "m",
                                         "ignore_eos": True}}, "p.toml")
    assert prof.target.sends_ignore_eos
    assert apply_overrides(prof, ["target.ignore_eos=false"]).target.sends_ignore_eos is False
    with pytest.raises(ProfileError, match=r"^p.toml: target.ignore_eos = 'yes': expected true or false$"):
        profile_from_dict({"target": {"ignore_eos": "yes"}}, "p.toml")


async def test_a_server_that_refuses_ignore_eos_gets_a_preflight_line_naming_the_key(fake_server):
    srv = fake_server(FakeConfig(known_params=OPENAI_KEYS))  # as OpenAI's own API: unknown keys are a 400
    target = make_target(_remote(srv.base_url, True))
    try:
        with pytest.raises(PreflightError) as e:
            await target.preflight()
    finally:
        await target.aclose()
    assert "Unrecognized request argument supplied: ignore_eos" in str(e.value)
    assert "--set target.ignore_eos=false" in str(e.value)
    plain = make_target(_remote(srv.base_url))
    try:
        assert await plain.preflight() == ["fake-model"]  # the default sends nothing it would refuse
    finally:
        await plain.aclose()


@pytest.mark.slow
async def test_ignore_eos_reaches_the_real_local_servers_sampling_params():
    from tui.serve.local import LocalServer

    # "hello world" on the seeded dummy model emits EOS after a few tokens (greedy)
    engine = EngineConfig(model="tiny", device="cpu", threads=1, kv_budget_mb=2.0, max_model_len=512)
    with LocalServer(Profile(engine=engine)).start() as srv:
        lengths = {}
        for ignore_eos in (None, True):
            target = make_target(_remote(srv.base_url, ignore_eos, model="kvtui-tiny"))
            rec = RequestRecord(request_id=f"eos-{ignore_eos}", index=0, stage="s", mode="m", scheduled_t=now())
            try:
                await target.send(RequestSpec(0, "hello world", 11, 32, False), rec)
            finally:
                await target.aclose()
            assert rec.status == "ok", rec.reason
            lengths[ignore_eos] = (rec.completion_tokens, rec.finish_reason)
    assert lengths[True] == (32, "length")  # EOS ignored: exactly the max_tokens the workload asked for
    stopped, reason = lengths[None]
    assert reason == "stop" and stopped < 32  # not sent: the engine stopped at its EOS token
