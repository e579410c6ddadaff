"""Numbers written as text: '$12,500', '1.234,5 €', '45%', '(1,200)', '3.5 kg'.

A CSV holds such columns as text, and read as text a column of amounts is nearly all distinct values:
an `id`, left out. A column is numbers written as text when its values share one way of writing them:
one decimal mark and at most one thousands separator (groups of three digits), and the same text
around each number, or none (a currency sign before it; '%', a currency sign or a unit after it; a
unit's plural 'years' counts as 'year'), on at least half the rows where there is text (a letter after a
few numbers is a code: '136A'). Parentheses around a number make it negative, as accountants write it.
The number is kept as written: '45%' reads 45, '3.5 kg' reads 3.5. The marks spreadsheets and statistics
packages write for a missing number ('?', '-', 'n/a', 'null', ...) are missing values, said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

CURRENCY = "$€£¥₹₩₽₺₪฿₫₴₦₱"
# [sign] [currency, with up to two letters: 'US$', 'R$'] [sign] digits and separators [suffix]
VALUE = re.compile(
    r"^(?P<open>\()?\s*(?P<sign>[-+−]?)\s*(?P<pre>(?:[A-Z]{0,2}[" + CURRENCY + r"])?)\s*(?P<sign2>[-+−]?)"
    r"(?P<core>\d[\d.,' ]*\d|\d)\s*(?P<post>%|‰|[" + CURRENCY + r"]|[A-Za-zµ°²³][A-Za-zµ°²³/. ]{0,11})?\s*"
    r"(?P<close>\))?$"
)
# (decimal mark, thousands separator), in the order a column readable both ways is read
MARKS = ((".", None), (".", ","), (".", " "), (".", "'"), (",", None), (",", "."), (",", " "))
MIN_SHARE = 0.95  # of a column's rows its way of writing must read, where some rows do not
REASON = "numbers written as text"
# what spreadsheets and statistics packages write for a missing number (compared stripped, in lower case)
MISSING = frozenset({"?", "-", "--", "---", "–", "—", ".", "na", "n/a", "n.a.", "nan", "null", "missing",
                     "unknown", "#n/a", "#na"})


@dataclass(frozen=True)
class NumberFormat:
    """How a column writes its numbers."""

    decimal: str
    thousands: Optional[str]
    before: str  # text before each number ('$'), or ''
    after: str  # text after it ('%', 'kg'), or ''
    missing: tuple[str, ...] = ()  # the marks it writes for a missing number ('?', 'n/a')

    def describe(self) -> str:
        parts = [", ".join(map(repr, self.missing)) + " for missing" if self.missing else "",
                 f"{self.before!r} before" if self.before else "",
                 f"{self.after!r} after" if self.after else "",
                 f"{self.thousands!r} between thousands" if self.thousands else "",
                 "a decimal comma" if self.decimal == "," else ""]
        return ", ".join(p for p in parts if p)


def _pieces(value: str) -> Optional[tuple]:
    """(negative, before, core, after) of one written value, or None where it is no written number."""
    m = VALUE.match(value.replace("\u00a0", " ").strip())
    if m is None or bool(m["open"]) != bool(m["close"]) or (m["sign"] and m["sign2"]):
        return None
    after = (m["post"] or "").strip()
    if len(after) > 3 and after.endswith("s") and not after.endswith("ss"):
        after = after[:-1]  # 'years' and 'year' are one unit
    negative = bool(m["open"]) or (m["sign"] or m["sign2"]) in ("-", "−")
    return negative, m["pre"], m["core"], after


def _number(core: str, decimal: str, thousands: Optional[str]) -> Optional[float]:
    whole, _, fraction = core.partition(decimal)
    if decimal in fraction or (fraction and not fraction.isdigit()):
        return None
    if thousands is None:
        ok = whole.isdigit()
    else:
        groups = whole.split(thousands)
        grouped = all(len(g) == 3 and g.isdigit() for g in groups[1:])
        ok = whole.isdigit() if len(groups) == 1 else groups[0].isdigit() and len(groups[0]) <= 3 and grouped
    return float(whole.replace(thousands or "", "") + ("." + fraction if fraction else "")) if ok else None


def detect(values: pd.Series, min_share: float = 1.0) -> Optional[NumberFormat]:
    """The way a text column writes its numbers, where one way reads at least `min_share` of its
    non-missing rows, and some rows need it (a separator, text around the number or a missing mark:
    plain numbers are read as numbers by the file's reader); else None."""
    counts = values.dropna().astype(str).value_counts()
    marks = [v for v in counts.index if is_missing_mark(v)]
    counts = counts.drop(marks)
    total = int(counts.sum())
    if total == 0:
        return None
    head = [(_pieces(v), int(n)) for v, n in counts.head(20).items()]  # most text columns end here
    if sum(n for p, n in head if p is None) > (1 - min_share) * total:
        return None
    pieces = head + [(_pieces(v), int(n)) for v, n in counts.iloc[20:].items()]
    affixes: dict = {}
    for p, n in pieces:
        if p is not None and (p[1] or p[3]):
            affixes[(p[1], p[3])] = affixes.get((p[1], p[3]), 0) + n
    before, after = max(affixes, key=affixes.get) if affixes else ("", "")
    if affixes.get((before, after), 0) < 0.5 * total:  # text on a few numbers: codes ('136A'), not units
        before, after = "", ""
    for decimal, thousands in MARKS:
        fmt = NumberFormat(decimal, thousands, before, after, tuple(sorted(marks)))
        if sum(n for p, n in pieces if _value(p, fmt) is not None) >= min_share * total:
            written = before or after or thousands or decimal == "," or marks
            return fmt if written else None
    return None


def is_missing_mark(value: str) -> bool:
    """Whether a written value is a mark for a missing number."""
    return value.strip().lower() in MISSING


def _value(p: Optional[tuple], fmt: NumberFormat) -> Optional[float]:
    """A written value's number in the column's way of writing, its text around the number optional."""
    if p is None or (p[1], p[3]) not in ((fmt.before, fmt.after), ("", "")):
        return None
    number = _number(p[2], fmt.decimal, fmt.thousands)
    return None if number is None else -number if p[0] else number


def read(values: pd.Series, fmt: NumberFormat) -> tuple[np.ndarray, pd.Series]:
    """The column's numbers (float64, missing where a value is a missing mark or not written the column's
    way; a number without the column's text around it is read), and the values not written that way
    (missing marks aside), each once."""
    import numpy as np
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return values.to_numpy(dtype=np.float64, na_value=np.nan), pd.Series([], dtype=object)
    codes, uniques = pd.factorize(values.astype(object).where(values.notna(), None))
    numbers = np.full(len(uniques), np.nan)
    missing = np.zeros(len(uniques), dtype=bool)
    for i, v in enumerate(uniques):
        number = _value(_pieces(str(v)), fmt)
        if number is not None:
            numbers[i] = number
        missing[i] = is_missing_mark(str(v))
    out = np.where(codes >= 0, numbers[np.maximum(codes, 0)], np.nan)
    return out, pd.Series(uniques[np.isnan(numbers) & ~missing], dtype=object)


CODE = re.compile(r"^(?=[^\s]*\d)(?=[^\s]*[A-Za-z])[A-Za-z0-9_./-]{2,12}$")


def are_codes(texts, numbers: "np.ndarray") -> bool:
    """Whether a column's text values are codes beside its numbers, not dirt in them: every text value one
    short token mixing letters and digits ('136A', 'c168', 'B-12'), every number whole (identifiers,
    stations, families, plots), as a register numbers most entries and letters a few. A word ('forty'),
    a number with a fraction beside them, or a value with a space is dirt, named in the error."""
    import numpy as np

    whole = numbers[np.isfinite(numbers)]
    return (bool(len(whole)) and bool(np.all(whole == np.round(whole)))
            and all(CODE.match(str(v)) for v in texts))
