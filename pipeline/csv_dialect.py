"""How a CSV file writes its text, found from its first bytes: its encoding and its field separator.

pandas and pyarrow read UTF-8 separated by commas. A table saved by a spreadsheet in much of Europe is
often Windows-1252 text separated by ';' (its decimal commas are then numbers written as text, which the
column typing reads: pipeline.number_text); a database export is often separated by tabs or '|'. Read
as UTF-8 and commas, the first fails on its first accented letter and the second is one column. Every
reader of a local CSV (its header, its label column, a sample, the whole table, prediction's chunks)
takes the same dialect, and a file read otherwise than UTF-8 and commas is said once."""

from __future__ import annotations

import codecs
import csv
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DataError

log = logging.getLogger(__name__)

HEAD_BYTES = 1 << 16  # what the dialect is read from: the header and the first rows
SEPARATORS = (",", ";", "\t", "|")  # in the order a tie is decided


@dataclass(frozen=True)
class Dialect:
    encoding: str = "utf-8"
    sep: str = ","

    def read_csv(self) -> dict:
        """pandas.read_csv's options for it (none for UTF-8 and commas)."""
        return {} if self == Dialect() else {"encoding": self.encoding, "sep": self.sep}

    def describe(self) -> str:
        parts = [f"separated by {self.sep!r}" if self.sep != "," else "",
                 f"encoded as {self.encoding}" if self.encoding != "utf-8" else ""]
        return " and ".join(p for p in parts if p)


def dialect(path: Path) -> Dialect:
    """The dialect of the local CSV file at `path` (read once per version of the file)."""
    stat = path.stat()
    return _dialect(str(path), stat.st_mtime_ns, stat.st_size)


def options(path: Path) -> dict:
    """pandas.read_csv's options for the local CSV file at `path`."""
    return dialect(path).read_csv()


def first_row(path: Path) -> list[str]:
    """The file's first row (its header) as the csv module reads it in the file's dialect."""
    found = dialect(path)
    with open(path, newline="", encoding=found.encoding) as fh:
        return next(csv.reader(fh, delimiter=found.sep), [])


@functools.lru_cache(maxsize=64)
def _dialect(path: str, mtime_ns: int, size: int) -> Dialect:
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    if head.startswith(b"PAR1"):
        raise DataError(f"{path!r} is a Parquet file, not a CSV one: data=parquet reads it (or data.path "
                        "alone, which picks the reader by the file's suffix)")
    encoding = _encoding(head, complete=size <= HEAD_BYTES)
    if b"\x00" in head and not encoding.startswith("utf-16"):
        raise DataError(f"{path!r} is not a CSV file: it holds NUL bytes, which text in any 8-bit encoding or "
                        "UTF-8 does not (a binary file, or UTF-16 text without its byte-order mark)")
    text = head.decode(encoding, errors="ignore")
    first = text.splitlines()[0] if text else ""
    widths = {sep: len(next(csv.reader([first], delimiter=sep), [])) for sep in SEPARATORS}
    sep = "," if widths[","] > 1 else max(SEPARATORS, key=lambda s: (widths[s], -SEPARATORS.index(s)))
    found = Dialect(encoding, sep if widths[sep] > 1 else ",")
    if found != Dialect():
        log.info("%s: read as CSV %s (the file's first %d KB say so)", path, found.describe(),
                 min(size, HEAD_BYTES) // 1024 or 1)
    return found


def _encoding(head: bytes, complete: bool) -> str:
    """UTF-8 (with or without its byte-order mark) where the bytes decode as UTF-8, a character cut at the
    end of a partial read aside; UTF-16 after its byte-order mark; else Windows-1252, else Latin-1 (which
    decodes any byte)."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # a spreadsheet's "Unicode text"
        return "utf-16"
    try:
        head.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        if not complete and exc.start >= len(head) - 3:
            return "utf-8"
    try:
        head.decode("cp1252")
        return "cp1252"
    except UnicodeDecodeError:
        return "latin-1"
