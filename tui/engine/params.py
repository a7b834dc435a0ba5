"""How one request wants its tokens generated: the one request-parameters type.

The HTTP layer (``tui.serve.openai_api``) builds a :class:`SamplingParams` from a validated request
body, the API process sends it unchanged to the engine process, and ``Engine.add_request`` takes it;
nothing on the way repeats its fields. Like vLLM's and nano-vllm's ``SamplingParams``, and with the
same defaults as vLLM (and the OpenAI API): 16 tokens, temperature 1, stop at the end-of-sequence
token. Benchmarks and load tests that need exact output lengths say ``ignore_eos=True``; see
:meth:`SamplingParams.exact`.

It is a frozen, slotted dataclass of plain values, so it pickles in a few hundred bytes and can be
shared between requests and processes without copying.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling and stopping settings of one request.

    - ``max_tokens``: output tokens to generate at most (at least 1).
    - ``temperature``: 0 samples greedily (argmax); above 0, from the softmax of the logits divided
      by it.
    - ``seed``: seeds the request's own random generator (temperature > 0), so its tokens do not depend
      on what else runs in the batch; None uses seed 0.
    - ``ignore_eos``: keep generating past the end-of-sequence token (vLLM's extension), so the output
      is exactly ``max_tokens`` long.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not self.temperature >= 0:  # also refuses NaN
            raise ValueError(f"temperature must be at least 0, got {self.temperature}")

    @classmethod
    def exact(cls, max_tokens: int) -> SamplingParams:
        """Greedy and exactly ``max_tokens`` long: what benchmarks and engine tests generate."""
        return cls(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
