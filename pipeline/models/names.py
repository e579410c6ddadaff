"""Column names as a library accepts them: the user's names stay in every output, the library sees
these. Each character a library refuses becomes `_`, and a clash gets the column's position."""

from __future__ import annotations

import re

LIGHTGBM_REFUSES = re.compile(r'["\\:,\[\]{}]')  # LightGBM: "Do not support special JSON characters"
XGBOOST_REFUSES = re.compile(r"[\[\]<,]")  # XGBoost: "feature_names ... may not contain [, ] or <"


def safe_names(columns, refused: re.Pattern) -> list[str]:
    """Names without the refused characters, unique, in the columns' order."""
    names, taken = [], set()
    for position, column in enumerate(map(str, columns)):
        name = refused.sub("_", column) or f"column_{position}"
        if name in taken:
            name = f"{name}_{position}"
        taken.add(name)
        names.append(name)
    return names


def needs_renaming(columns, refused: re.Pattern) -> bool:
    return any(refused.search(str(c)) for c in columns)
