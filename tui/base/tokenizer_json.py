"""A Hugging Face ``tokenizer.json``, read with ``tokenizers`` (no hub, nothing downloaded).

The one loader two layers share: the engine reads a checkpoint's tokenizer with it, and the load
generator sizes a remote model's prompts in that model's own tokens (``[target] tokenizer``). It sits
below both so neither imports the other.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from tui.profile import ProfileError

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class TokenizerFileError(ProfileError):
    """A ``tokenizer.json`` is missing or malformed; the message is one line naming the file."""


def tokenizer_json_path(ref: str | Path) -> Path:
    """The ``tokenizer.json`` a reference names: the file itself, or the one in a model directory."""
    path = Path(ref).expanduser()
    return path / "tokenizer.json" if path.is_dir() else path


def read_tokenizer_json(ref: str | Path, owner: str = "model") -> Tokenizer:
    """The tokenizer in ``ref`` (a ``tokenizer.json`` or a directory holding one); raises :class:`TokenizerFileError`
    (``owner`` names whose tokenizer it is in the message: the model, a checkpoint)."""
    path = tokenizer_json_path(ref)
    if not path.is_file():
        raise TokenizerFileError(
            f"{path}: missing; kvtui reads the {owner}'s fast tokenizer (written by tokenizer.save_pretrained)"
        )
    stat = path.stat()
    try:
        return _read(path.resolve(), stat.st_mtime_ns, stat.st_size)
    except Exception as e:  # tokenizers raises a bare Exception with serde's message
        raise TokenizerFileError(f"{path}: not a valid tokenizer.json: {e}") from None


# A run reads one tokenizer many times (a load runner per stage and mode); a file rewritten since is read again.
@functools.lru_cache(maxsize=4)
def _read(path: Path, mtime_ns: int, size: int) -> Tokenizer:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))
