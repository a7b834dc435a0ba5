"""Before any load on a remote target: do the workload's requests fit the server's ``max_model_len``?

A remote server counts a prompt in its own tokens, while a profile without ``target.tokenizer`` sizes
prompts in words; a "512-word" prompt can be 700 tokens, and the server refuses what passes its
context. The recorder and the dashboard both ask this one function before they send load: it counts
the first requests of the workload with the server's ``/tokenize`` where it has one (vLLM's, which
``kvtui serve`` also answers), else as sized here, against the ``max_model_len`` the server's
``/v1/models`` lists (read by :meth:`OpenAITarget.preflight`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.base.tokenizer_json import read_tokenizer_json
from tui.load.load_runner import prompt_sizing
from tui.load.target import OpenAITarget
from tui.load.workload import Workload
from tui.profile import Profile, WorkloadConfig

REMOTE_LENGTH_SAMPLE = 32  # requests of a remote run counted against the server's max_model_len


@dataclass(frozen=True)
class LengthCheck:
    """How many of the ``sampled`` first requests exceed ``limit`` (prompt + max_tokens), the longest of
    them, and who counted the prompts ("by the server's /tokenize" or "as sized here")."""

    limit: int
    sampled: int
    too_long: int
    longest_prompt: int
    longest_output: int
    counted_by: str

    def message(self, what: str) -> str:
        """One line for the user: what exceeds, and what to do."""
        return (f"{what}: {self.too_long} of the first {self.sampled} requests exceed the server's max_model_len "
                f"{self.limit} (the longest: {self.longest_prompt} prompt tokens {self.counted_by} + "
                f"{self.longest_output} output tokens); the server would refuse them: lower workload.prompt_len / "
                "workload.output_len, or set target.tokenizer to the served model's so prompts are sized in its "
                "tokens")


async def check_lengths(profile: Profile, target: OpenAITarget, workload: WorkloadConfig | None = None,
                        requests: int = REMOTE_LENGTH_SAMPLE) -> LengthCheck | None:
    """The first ``requests`` (at most :data:`REMOTE_LENGTH_SAMPLE`) of ``workload`` (the profile's by
    default) against the server's limit; None when the server lists no ``max_model_len`` or all fit."""
    limit = target.max_model_len
    if limit is None:
        return None
    unit, ref = prompt_sizing(profile)
    tokenizer = read_tokenizer_json(ref) if unit == "token" and ref else None
    source = Workload(workload or profile.workload, unit, tokenizer=tokenizer)
    sampled = min(max(1, requests), REMOTE_LENGTH_SAMPLE)
    too_long, counted_by = [], "as sized here"
    for i in range(sampled):
        spec = source.spec(i)
        count = await target.count_tokens(spec.prompt)
        if count is not None:
            counted_by = "by the server's /tokenize"
        tokens = count if count is not None else spec.prompt_len
        if tokens + spec.max_tokens > limit:
            too_long.append((tokens + spec.max_tokens, tokens, spec.max_tokens))
    if not too_long:
        return None
    _, tokens, out = max(too_long)
    return LengthCheck(limit, sampled, len(too_long), tokens, out, counted_by)
