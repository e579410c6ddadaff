"""Small operations on the user's tables that hold whatever the columns are named."""

from __future__ import annotations


def with_columns(frame, values: dict):
    """A copy of `frame` with the columns of `values` (name -> values) replaced or added. Not
    `DataFrame.assign(**values)`: that takes the names as keyword arguments, so a table's column named
    `self` (a yes/no column of a mortgage table) fails with a TypeError."""
    frame = frame.copy()
    for name, column in values.items():
        frame[name] = column
    return frame
