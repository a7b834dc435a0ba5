"""How one request wants its tokens generated: the one request-parameters type.

The HTTP layer (``tui.serve.protocol``) builds a :class:`SamplingParams` from a validated request
body, the API process sends it unchanged to the engine process, and ``Engine.add_request`` takes it;
nothing on the way repeats its fields. Like vLLM's and nano-vllm's ``SamplingParams``, and with the
same defaults as vLLM (and the OpenAI API): 16 tokens, temperature 1, the whole vocabulary, no
penalties, stop at the end-of-sequence token. Benchmarks and load tests that need exact output lengths
say ``ignore_eos=True``; see :meth:`SamplingParams.exact`. How the knobs act on the logits is
:mod:`tui.engine.sampling`.

It is a frozen, slotted dataclass of plain values, so it pickles in a few hundred bytes and can be
shared between requests and processes without copying.
"""

from __future__ import annotations

from dataclasses import dataclass

# One sampled token's log-probability and the top tokens' (id, log-probability), most likely first:
# what the engine sends back per token for a request with ``logprobs`` (plain values: cheap to pickle).
TokenLogprobs = tuple[float, tuple[tuple[int, float], ...]]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling and stopping settings of one request (vLLM's names and meanings).

    - ``max_tokens``: output tokens to generate at most (at least 1).
    - ``temperature``: 0 samples greedily (argmax); above 0, from the softmax of the logits divided
      by it.
    - ``seed``: seeds the request's own random generator (temperature > 0), so its tokens do not depend
      on what else runs in the batch; None: an independent, unpredictable draw per request.
    - ``ignore_eos``: keep generating past the end-of-sequence token (vLLM's extension), so the output
      is exactly ``max_tokens`` long (``stop_token_ids`` still stop it).
    - ``top_k`` (0: all tokens), ``top_p`` (1: all), ``min_p`` (0: none): which tokens may be sampled.
    - ``presence_penalty`` / ``frequency_penalty`` (over the output so far) and
      ``repetition_penalty`` (over prompt and output; 1: none).
    - ``min_tokens``: end-of-sequence and stop tokens cannot be sampled before this many outputs.
    - ``stop_token_ids``: more tokens that end the request ("stop"), besides end-of-sequence.
    - ``logprobs``: None for none; k >= 0 returns each sampled token's log-probability and the k most
      likely tokens' (vLLM's: of the raw logits, before temperature and penalties).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # a simulated answer length: the request ends ("stop") after this many output tokens, as if the
    # model sampled EOS there, so a client can ask for more max_tokens than it gets
    eos_after: int | None = None

    @property
    def output_limit(self) -> int:
        """The most output tokens this request produces: ``max_tokens``, or its answer length if shorter."""
        return self.max_tokens if self.eos_after is None else max(1, min(self.eos_after, self.max_tokens))

    @property
    def limit_reason(self) -> str:
        """The finish reason at :attr:`output_limit`: "stop" at an answer's end, else "length"."""
        return "length" if self.output_limit >= self.max_tokens else "stop"

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not self.temperature >= 0:  # also refuses NaN
            raise ValueError(f"temperature must be at least 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be at least 0 (0: all tokens), got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must lie in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be above 0, got {self.repetition_penalty}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must lie in [0, max_tokens = {self.max_tokens}], got {self.min_tokens}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be at least 0, got {self.logprobs}")
        if self.prompt_logprobs is not None and self.prompt_logprobs < 0:
            raise ValueError(f"prompt_logprobs must be at least 0, got {self.prompt_logprobs}")

    @classmethod
    def exact(cls, max_tokens: int) -> SamplingParams:
        """Greedy and exactly ``max_tokens`` long: what benchmarks and engine tests generate."""
        return cls(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def plain(self) -> bool:
        """Nothing but temperature acts on the logits (the runner's batched fast path)."""
        return (self.top_p == 1 and self.top_k == 0 and self.min_p == 0 and self.presence_penalty == 0
                and self.frequency_penalty == 0 and self.repetition_penalty == 1 and self.min_tokens == 0
                and self.logprobs is None)
