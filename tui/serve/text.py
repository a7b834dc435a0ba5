"""Turning streamed token ids into text: :class:`TextAssembler` (stop strings, held-back bytes)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.engine.tokenizer import IncrementalDecoder


class TextAssembler:
    """Turns a stream of token ids into text deltas, with stop strings.

    The text comes from the tokenizer's incremental decoder (:meth:`Tokenizer.incremental_decoder`:
    bytes of a character still to come are held back there). Any tail that could be the start of a
    stop string is held back here, so a stop string is never half-sent; without stop strings every
    delta goes out as it is decoded (and no text is kept: the per-token path of a streamed response).
    """

    def __init__(self, decoder: IncrementalDecoder, stop: Sequence[str] = (), eos_token_ids: Collection[int] = ()):
        self._decoder = decoder
        self._stop = tuple(stop)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._eos = frozenset(eos_token_ids)
        self.text = ""  # with stop strings: the text decoded so far (up to the stop string, once found)
        self._sent = 0  # characters of ``text`` already handed out
        self.tokens = 0  # tokens that count towards usage (up to and including the one that stopped)
        self.stopped = False
        self.stop_string: str | None = None  # the stop string that matched (vLLM's stop_reason)

    def add(self, token_ids: Sequence[int], *, final: bool = False, ended_by_eos: bool = False) -> str:
        """Feed new tokens; returns the text that may be sent now.

        ``final`` flushes held-back text; ``ended_by_eos`` says the last token is the model's
        end-of-sequence token, which counts as a token but has no text.
        """
        ids = list(token_ids)
        eos = ended_by_eos and bool(ids) and ids[-1] in self._eos
        if eos:
            ids.pop()
        decode = self._decoder.decode
        if not self._stop:  # nothing to hold back: the decoder's text is the delta
            self.tokens += len(ids) + eos
            return decode(ids, final) if ids or final else ""
        for tok in ids:  # token by token: usage counts up to the token that completed a stop string
            if self.stopped:
                break
            self.tokens += 1
            self._append(decode([tok]))
        if eos and not self.stopped:
            self.tokens += 1
        if final and not self.stopped:
            self._append(decode([], True))
        return self._take(final or self.stopped)

    def _append(self, delta: str) -> None:
        if not delta:
            return
        start = max(0, len(self.text) - self._hold)
        self.text += delta
        hits = [(i, s) for s in self._stop if (i := self.text.find(s, start)) >= 0]
        if hits:
            at, self.stop_string = min(hits)
            self.text = self.text[:at]
            self.stopped = True

    def _take(self, flush: bool) -> str:
        end = len(self.text) if flush else max(self._sent, len(self.text) - self._hold)
        out = self.text[self._sent : end]
        self._sent = end
        return out

