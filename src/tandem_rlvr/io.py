"""Small file helpers: atomic writes, and text/JSON/jsonl reading with one-line errors naming file and line
(a file that is not UTF-8 text included: ``read_text``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import TandemError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path`` and move it into place only on success.

    A crash or an exception leaves the old file (or no file) behind, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_write(path) as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file's content, newlines translated as ``Path.read_text`` does; a file that is
    not UTF-8 is a ``TandemError`` naming it, the line and the first bad byte (never a traceback)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TandemError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                          "save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """Where ``text`` holds a lone surrogate (U+D800-U+DFFF), in words, else None. JSON's escape of half
    an emoji and a command-line byte that is not UTF-8 leave one; it is no Unicode character, so no
    tokenizer can encode it (the Rust tokenizers raise a TypeError) and no UTF-8 file can hold it."""
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return f"a lone surrogate U+{ord(m.group()):04X} at character {m.start()} (not valid Unicode)"


def read_json(path: str | os.PathLike, missing: str | None = None) -> Any:
    """Parse a JSON file. Missing: TandemError(``missing``, or a default naming the file);
    malformed: TandemError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise TandemError(missing or f"file not found: {path}")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise TandemError(f"{path}:{e.lineno}: malformed JSON ({e.msg})") from None


def jsonl_objects(path: str | os.PathLike) -> Iterator[tuple[str, Any]]:
    """(``file:line``, parsed value) of each non-blank line of a jsonl file; a line that is not
    JSON is a ``TandemError`` naming file and line ("malformed JSON line")."""
    for lineno, line in enumerate(read_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line)
        except json.JSONDecodeError as e:
            raise TandemError(f"{path}:{lineno}: malformed JSON line ({e.msg})") from None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a jsonl file of objects; a malformed line is a ``TandemError`` naming file and line."""
    rows = []
    for where, row in jsonl_objects(path):
        if not isinstance(row, dict):
            raise TandemError(f"{where}: expected a JSON object per line")
        rows.append(row)
    return rows
