"""Production traces, read one request at a time: Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV,
ShareGPT JSON.

Every format has one reader behind one interface (:class:`TraceReader`): ``read(path)`` yields
:class:`TraceRequest` s in file order, streaming (a trace larger than memory is never loaded whole).
:func:`reader_for` picks one by name or detects it from the file's first record. A malformed record is a
:class:`TraceError`: one line naming the file, the line and the field (a :class:`~tui.profile.ProfileError`,
so the CLI exits 2 on it). Nothing is downloaded: the user passes a file.

Lengths are as the trace counts them (tokens of the model that served it). Mooncake's ``hash_ids`` name
the trace's prefix blocks of :data:`MOONCAKE_BLOCK_TOKENS` tokens: two requests with equal leading hash
ids shared that much prompt. ShareGPT conversations carry text, not counts; a turn's length is its
text's length in the unit the caller counts (the local engine's byte tokenizer: UTF-8 bytes), and a
later turn of a conversation carries every earlier turn (questions and answers) as its prefix.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, TextIO, get_args

from tui.profile import ProfileError

TraceFormat = Literal["mooncake", "azure", "burstgpt", "sharegpt"]
FORMATS: tuple[TraceFormat, ...] = get_args(TraceFormat)

MOONCAKE_BLOCK_TOKENS = 512  # one Mooncake hash id covers this many prompt tokens (the trace's own block size)
# Bounds checked as a record is parsed, so a hostile number never sizes memory: a row with
# ``input_length: 1e300`` grew a replay's memory without limit (2.5 GB in 30 s).
MAX_TRACE_TOKENS = 10_000_000  # no model serves a longer prompt or answer
MAX_TRACE_SECONDS = 1e11  # about 3,000 years: past any epoch time a trace's clock starts at
MAX_LINE_CHARS = 16 * 1024 * 1024  # a JSONL or CSV record; a longer line is refused, never read whole


class TraceError(ProfileError):
    """A trace file that cannot be replayed; the message is one line naming the file, line and field."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    ``arrival_s``: when it arrived, in seconds on the trace's own clock (None: the format has no times).
    ``hash_ids``: Mooncake prefix blocks. ``session``/``prefix_len``: a ShareGPT conversation's index and
    how many of this turn's ``input_len`` tokens are the conversation so far (the turns before it).
    """

    line: int
    arrival_s: float | None
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    session: int | None = None
    prefix_len: int = 0


def _fail(path: Path, line: int, field: str, problem: str) -> TraceError:
    return TraceError(f"{path}:{line}: {field}: {problem}")


def _length(path: Path, line: int, field: str, value: Any) -> int:
    """A token count: a non-negative integer (a float with no fraction, as CSV tools write it, passes).

    0 becomes 1: a request asks for at least one token (BurstGPT logs failed requests with 0 output)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise _fail(path, line, field, f"{_short(value)} is not a token count") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, line, field, f"{_short(value)} is not a token count")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise _fail(path, line, field, f"{_short(value)} is not a whole number of tokens")
    if value < 0:
        raise _fail(path, line, field, f"{_short(int(value))} is negative")
    if value > MAX_TRACE_TOKENS:
        raise _fail(path, line, field, f"{_short(value)} tokens is more than {MAX_TRACE_TOKENS:,}")
    return max(1, int(value))


def _short(value: Any) -> str:
    """A value as an error quotes it: never a 4,000-digit integer (str() of one raises)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _seconds(path: Path, line: int, field: str, value: Any, scale: float = 1.0) -> float:
    """A number of seconds (``value`` × ``scale``), finite and non-negative."""
    try:
        t = float(value) * scale if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        raise _fail(path, line, field, f"{_short(value)} is not a number") from None
    if not math.isfinite(t) or t < 0 or t > MAX_TRACE_SECONDS:
        raise _fail(path, line, field, f"{_short(value)} is not a finite, non-negative time "
                    f"(at most {MAX_TRACE_SECONDS:g} s)")
    return t


class TraceReader:
    """One trace format: ``read(path)`` yields its requests in file order, one at a time."""

    name: TraceFormat

    def read(self, path: Path) -> Iterator[TraceRequest]:
        raise NotImplementedError

    @staticmethod
    def looks_like(first: str) -> bool:
        """Whether the file's first non-empty line (a CSV header, a JSON record) is this format's."""
        raise NotImplementedError


class _Ordered:
    """Arrival times must not go backwards: a replay sends in file order."""

    def __init__(self, path: Path, field: str):
        self.path, self.field, self.last = path, field, -math.inf

    def check(self, line: int, t: float) -> float:
        if t < self.last:
            raise _fail(self.path, line, self.field, f"goes back in time ({t:g} s after {self.last:g} s): "
                        "a trace is replayed in file order, sorted by arrival")
        self.last = t
        return t


def _lines(path: Path, f: IO[str]) -> Iterator[str]:
    """``f``'s lines, each read with a bound: a line over :data:`MAX_LINE_CHARS` is a TraceError
    before it is held whole (a single-line 200 MB file peaked at 398 MB)."""
    n = 0
    while True:
        text = f.readline(MAX_LINE_CHARS + 1)
        if not text:
            return
        n += 1
        if len(text) > MAX_LINE_CHARS:
            raise _fail(path, n, "line", f"longer than {MAX_LINE_CHARS:,} characters (one record per line?)")
        yield text


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(_lines(path, f), 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise _fail(path, n, "line", f"not JSON ({e.msg})") from None
            except (ValueError, RecursionError) as e:  # an integer over 4,300 digits; nesting
                raise _fail(path, n, "line", f"not JSON kvtui reads ({type(e).__name__})") from None
            if not isinstance(obj, dict):
                raise _fail(path, n, "line", "not a JSON object")
            yield n, obj


def _need(path: Path, line: int, obj: dict[str, Any], field: str) -> Any:
    if field not in obj:
        raise _fail(path, line, field, "missing")
    return obj[field]


class MooncakeReader(TraceReader):
    """Mooncake's JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""

    name: TraceFormat = "mooncake"

    @staticmethod
    def looks_like(first: str) -> bool:
        return first.lstrip().startswith("{") and '"input_length"' in first

    def read(self, path: Path) -> Iterator[TraceRequest]:
        order = _Ordered(path, "timestamp")
        for n, obj in _json_lines(path):
            t = order.check(n, _seconds(path, n, "timestamp", _need(path, n, obj, "timestamp"), 1e-3))
            hashes = obj.get("hash_ids", [])
            if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
                raise _fail(path, n, "hash_ids", "not a list of integers")
            yield TraceRequest(n, t, _length(path, n, "input_length", _need(path, n, obj, "input_length")),
                               _length(path, n, "output_length", _need(path, n, obj, "output_length")),
                               hash_ids=tuple(hashes))


def _csv_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        rows = csv.reader(_lines(path, f))
        try:
            yield from _csv_records(path, rows, columns)
        except csv.Error as e:  # a NUL byte, a field over csv's size limit, a stray quote
            raise _fail(path, rows.line_num, "row", f"not CSV ({e})") from None


def _csv_records(path: Path, rows: Any, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    header = next(rows, None)
    if header is None:
        raise _fail(path, 1, "header", "the file is empty")
    header = [h.strip() for h in header]
    for col in columns:
        if col not in header:
            raise _fail(path, 1, col, f"missing from the header (columns: {', '.join(header)[:200]})")
    where = {col: header.index(col) for col in columns}
    for row in rows:
        n = rows.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            missing = next((col for col, i in where.items() if i >= len(row)), "row")
            raise _fail(path, n, missing, "missing (the row is short)")
        yield n, {col: row[i] for col, i in where.items()}


def _azure_time(path: Path, line: int, text: str) -> float:
    """Azure's TIMESTAMP: ``2023-11-16 18:15:46.6805900`` (seven fractional digits), or plain seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return _seconds(path, line, "TIMESTAMP", seconds)
    head, dot, frac = text.partition(".")
    try:
        stamp = datetime.fromisoformat(head)
    except ValueError:
        raise _fail(path, line, "TIMESTAMP", f"{_short(text)} is not a date-time such as 2023-11-16 18:15:46.680") from None
    if dot and not (frac.isascii() and frac.isdigit()):
        raise _fail(path, line, "TIMESTAMP", f"{_short(text)} has a malformed fraction of a second")
    # float("0." + frac), not int(frac): a 5,000-digit fraction is a ValueError for int()
    return stamp.replace(tzinfo=UTC).timestamp() + (float("0." + frac) if frac else 0.0)


class AzureReader(TraceReader):
    """Azure LLM inference trace CSV: ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``."""

    name: TraceFormat = "azure"

    @staticmethod
    def looks_like(first: str) -> bool:
        return "ContextTokens" in first and "GeneratedTokens" in first

    def read(self, path: Path) -> Iterator[TraceRequest]:
        order = _Ordered(path, "TIMESTAMP")
        t0: float | None = None
        for n, row in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
            t = _azure_time(path, n, row["TIMESTAMP"])
            t0 = t if t0 is None else t0
            yield TraceRequest(n, order.check(n, t - t0), _length(path, n, "ContextTokens", row["ContextTokens"]),
                               _length(path, n, "GeneratedTokens", row["GeneratedTokens"]))


class BurstGPTReader(TraceReader):
    """BurstGPT CSV: ``Timestamp`` (s), ``Request tokens``, ``Response tokens``."""

    name: TraceFormat = "burstgpt"

    @staticmethod
    def looks_like(first: str) -> bool:
        return "Request tokens" in first and "Response tokens" in first

    def read(self, path: Path) -> Iterator[TraceRequest]:
        order = _Ordered(path, "Timestamp")
        for n, row in _csv_rows(path, ("Timestamp", "Request tokens", "Response tokens")):
            t = order.check(n, _seconds(path, n, "Timestamp", row["Timestamp"]))
            yield TraceRequest(n, t, _length(path, n, "Request tokens", row["Request tokens"]),
                               _length(path, n, "Response tokens", row["Response tokens"]))


class _JsonText:
    """A JSON file's text read a chunk at a time: a cursor (``pos``) into what is held, and its line."""

    def __init__(self, f: TextIO, chunk: int) -> None:
        self.f, self.chunk = f, chunk
        self.buf, self.line, self.pos, self.eof = "", 1, 0, False
        self.decoder = json.JSONDecoder()

    def more(self, size: int = 0) -> bool:
        """Read the next ``size`` characters (a chunk at least; dropping what the cursor has passed);
        False at the end of the file."""
        data = self.f.read(max(self.chunk, size))
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def skip(self, chars: str) -> None:
        """Move the cursor past any of ``chars``, reading on as needed."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in chars:
                self.line += self.buf[self.pos] == "\n"
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return

    def peek(self) -> str:
        """The character at the cursor ("" at the end)."""
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def value(self, path: Path) -> Any:
        """The JSON value at the cursor, the cursor and line moved past it."""
        # A record that runs past the buffer is decoded again from its start once more is read: reading
        # as much again as is held keeps that linear (a fixed 64 KiB step made one 50 MB record
        # quadratic: 118 s).
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
                held = len(self.buf) - self.pos
                if end == len(self.buf) and not self.eof and self.more(held):  # a number may go on
                    continue
                break
            except json.JSONDecodeError as e:
                if not self.eof and self.more(len(self.buf) - self.pos):
                    continue
                raise _fail(path, self.line + self.buf.count("\n", self.pos, e.pos), "record",
                            f"not JSON ({e.msg})") from None
            except (ValueError, RecursionError) as e:  # an integer over 4,300 digits; nesting
                raise _fail(path, self.line, "record", f"not JSON kvtui reads ({type(e).__name__})") from None
        self.line += self.buf.count("\n", self.pos, end)
        self.pos = end
        return obj


def _json_array(path: Path, chunk: int = 1 << 16) -> Iterator[tuple[int, Any]]:
    """The elements of a top-level JSON array, one at a time (with the line each starts on), or of JSONL."""
    with path.open(encoding="utf-8") as f:
        text = _JsonText(f, chunk)
        text.more()
        text.skip(" \t\r\n")
        array = text.peek() == "["
        if array:
            text.pos += 1
        while True:
            text.skip(" \t\r\n," if array else " \t\r\n")
            if not text.peek():
                if array:
                    raise _fail(path, text.line, "file", "the JSON array is not closed (truncated file?)")
                return
            if array and text.peek() == "]":
                return
            line = text.line
            yield line, text.value(path)


Counter = Callable[[str], int]


def utf8_bytes(text: str) -> int:
    """A text's length on the local engine's byte tokenizer: its UTF-8 bytes."""
    return len(text.encode("utf-8"))


class ShareGPTReader(TraceReader):
    """ShareGPT conversations (a JSON array, or JSONL): ``conversations`` of ``{"from", "value"}`` turns.

    Each human turn followed by an answer is a request: its prompt is the conversation so far plus the
    question, its output the answer's length. Lengths are ``count(text)`` (default: UTF-8 bytes, the local
    engine's byte tokenizer); there are no arrival times.
    """

    name: TraceFormat = "sharegpt"

    def __init__(self, count: Counter = utf8_bytes):
        self.count = count

    @staticmethod
    def looks_like(first: str) -> bool:
        return first.lstrip().startswith("[") or '"conversations"' in first

    def read(self, path: Path) -> Iterator[TraceRequest]:
        for session, (n, conv) in enumerate(_json_array(path)):
            turns = conv.get("conversations") if isinstance(conv, dict) else None
            if not isinstance(turns, list):
                raise _fail(path, n, "conversations", "missing, or not a list of turns")
            so_far = 0  # tokens of the conversation before this turn
            for k in range(len(turns) - 1):
                ask, answer = turns[k], turns[k + 1]
                for j, turn in ((k, ask), (k + 1, answer)):
                    if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                        raise _fail(path, n, f"conversations[{j}].value", "missing, or not text")
                if ask.get("from") not in ("human", "user") or answer.get("from") not in ("gpt", "assistant", "chatgpt"):
                    continue
                try:
                    ask_len, answer_len = self.count(ask["value"]), self.count(answer["value"])
                except UnicodeError:
                    raise _fail(path, n, f"conversations[{k}]", "text that is not valid Unicode (a lone surrogate?)") \
                        from None
                if ask_len == 0 or answer_len == 0:
                    so_far += ask_len + answer_len
                    continue
                yield TraceRequest(n, None, so_far + ask_len, answer_len, session=session, prefix_len=so_far)
                so_far += ask_len + answer_len


READERS: dict[TraceFormat, Callable[[], TraceReader]] = {
    "mooncake": MooncakeReader, "azure": AzureReader, "burstgpt": BurstGPTReader, "sharegpt": ShareGPTReader,
}


def _first_line(path: Path, limit: int = 4096) -> str:
    """The first ``limit`` characters of the first non-empty line, without reading the rest of it."""
    with path.open(encoding="utf-8", errors="replace") as f:
        while True:
            text = f.readline(limit)
            if not text:
                return ""
            if text.strip():
                return text
            while text and not text.endswith("\n"):  # a long run of blanks: finish that line
                text = f.readline(limit)


def detect_format(path: Path) -> TraceFormat:
    """The format of ``path`` from its first non-empty line; a TraceError listing the formats otherwise."""
    try:
        first = _first_line(path)
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    for name in FORMATS:
        if READERS[name]().looks_like(first):
            return name
    raise _fail(path, 1, "format", "not a trace kvtui knows (Mooncake JSONL, Azure or BurstGPT CSV, ShareGPT "
                "JSON); name one with workload.trace_format")


def reader_for(path: str | Path, fmt: str = "auto", count: Counter | None = None) -> TraceReader:
    """The reader for ``path``: ``fmt`` by name, or detected (``"auto"``); ``count`` sizes ShareGPT text."""
    p = Path(path).expanduser()
    name: TraceFormat = detect_format(p) if fmt == "auto" else fmt  # type: ignore[assignment]
    if name not in READERS:
        raise TraceError(f"{p}: trace_format = {fmt!r}: expected auto or one of {', '.join(FORMATS)}")
    if name == "sharegpt" and count is not None:
        return ShareGPTReader(count)
    return READERS[name]()


def read_trace(path: str | Path, fmt: str = "auto", count: Counter | None = None) -> Iterator[TraceRequest]:
    """``path``'s requests in file order, streamed (see :func:`reader_for`)."""
    p = Path(path).expanduser()
    try:
        yield from reader_for(p, fmt, count).read(p)
    except UnicodeDecodeError as e:
        raise TraceError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot read the trace: {e.strerror or e}") from None


@dataclass(frozen=True)
class TraceSummary:
    """What one streaming pass over (the first ``limit`` requests of) a trace found."""

    format: TraceFormat
    requests: int
    span_s: float | None  # first to last arrival (None: no arrival times)

    @property
    def mean_rate(self) -> float | None:
        """The trace's mean arrival rate, (requests - 1) / span (as the table's offered/s is computed)."""
        if self.span_s is None or self.span_s <= 0 or self.requests < 2:
            return None
        return (self.requests - 1) / self.span_s


def scan_trace(path: str | Path, fmt: str = "auto", limit: int | None = None,
               count: Counter | None = None) -> TraceSummary:
    """Read (the first ``limit`` requests of) a trace once, checking every record: a malformed one raises
    a one-line :class:`TraceError`; none at all is one too."""
    p = Path(path).expanduser()
    name = reader_for(p, fmt, count).name
    n, first, last = 0, None, None
    for req in read_trace(p, name, count):
        n += 1
        if req.arrival_s is not None:
            first = req.arrival_s if first is None else first
            last = req.arrival_s
        if limit is not None and n >= limit:
            break  # before reading the next record: the first ``limit`` are all that is checked
    if n == 0:
        raise TraceError(f"{p}: the trace has no requests")
    return TraceSummary(name, n, None if first is None or last is None else last - first)
