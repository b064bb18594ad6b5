"""Checks of a table (a pandas frame) against its schema: which columns it
has, of which type, in which range, and the checks that read a whole row.

A schema is a class of ``Column`` attributes; a subclass adds columns and
checks to its base's. ``Schema.check(frame)`` returns the frame with the
columns that say ``coerce`` converted to their type, or raises
``TableErrors``, whose ``cases`` frame holds one row per failure: the column
(None for a row check and a missing column), the check's name, the failing
value and the row's index label (None where a column or a row check fails
as a whole). The row checks' failures come first, then each column's. The names are what
the messages are made of (``dawnpipe.schemas.results.describe_failures``,
``dawnpipe.audit.validate.describe``): ``greater_than_or_equal_to(0)``,
``less_than(1)``, ``not_nullable``, ``isin([...])``, ``str_length(1, None)``,
``str_matches('...')``, ``dtype('float64')``, ``coerce_dtype('float64')``,
``column_in_dataframe``, ``unique_column_name``, and each column or row
check's own name.

Extra columns are allowed everywhere: what a table may hold besides its
schema's columns is the caller's to say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
import pandas as pd

_DTYPE_NAMES = {float: "float64", int: "int64", bool: "bool", str: "str"}
CASE_COLUMNS = ["column", "check", "failure_case", "index"]


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: its type, its bounds and allowed values (checked on the values
    that are not null), whether nulls are allowed, whether it must be there
    (``required=False``: checked where present) and whether its values are
    converted to ``dtype`` first (``coerce``; otherwise the column must
    already be of it). ``coerce=None``: as the schema says (``Schema``'s
    class keyword ``coerce``)."""

    dtype: type
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    isin: tuple[str, ...] | None = None
    min_length: int | None = None
    matches: str | None = None
    nullable: bool = False
    required: bool = True
    coerce: bool | None = None

    def value_checks(self) -> list[tuple[str, Callable[[pd.Series], pd.Series]]]:
        """(name, function of the non-null values -> which pass) of each bound and value rule."""
        checks: list[tuple[str, Callable[[pd.Series], pd.Series]]] = []
        if self.gt is not None:
            checks.append((f"greater_than({self.gt})", lambda v, b=self.gt: v > b))
        if self.ge is not None:
            checks.append((f"greater_than_or_equal_to({self.ge})", lambda v, b=self.ge: v >= b))
        if self.lt is not None:
            checks.append((f"less_than({self.lt})", lambda v, b=self.lt: v < b))
        if self.le is not None:
            checks.append((f"less_than_or_equal_to({self.le})", lambda v, b=self.le: v <= b))
        if self.isin is not None:
            checks.append((f"isin({list(self.isin)!r})", lambda v, allowed=self.isin: v.isin(allowed)))
        if self.min_length is not None:
            checks.append((f"str_length({self.min_length}, None)", lambda v, n=self.min_length: v.astype(str).str.len() >= n))
        if self.matches is not None:
            checks.append((f"str_matches('{self.matches}')", lambda v, p=self.matches: v.astype(str).str.match(p)))
        return checks


@dataclasses.dataclass(frozen=True)
class _ColumnCheck:
    column: str
    name: str
    fn: Callable[[pd.Series], pd.Series]


@dataclasses.dataclass(frozen=True)
class _RowCheck:
    name: str
    fn: Callable[[pd.DataFrame], pd.Series]


def column_check(column: str) -> Callable[[Callable[[pd.Series], pd.Series]], _ColumnCheck]:
    """A check of one column's non-null values, named after the function: ``fn(values) -> bool Series``."""
    return lambda fn: _ColumnCheck(column, fn.__name__, fn)


def row_check(fn: Callable[[pd.DataFrame], pd.Series]) -> _RowCheck:
    """A check of every row, named after the function: ``fn(frame) -> bool Series``."""
    return _RowCheck(fn.__name__, fn)


class TableErrors(Exception):
    """The failures of a table: ``cases`` (columns CASE_COLUMNS), row checks first."""

    def __init__(self, schema: str, cases: pd.DataFrame):
        super().__init__(f"{schema}: {len(cases)} failure(s)")
        self.cases = cases


class Schema:
    """Columns (``Column`` attributes, base class first, in the order written)
    and checks (``column_check``, ``row_check``) of a table."""

    columns: ClassVar[dict[str, Column]] = {}
    column_checks: ClassVar[tuple[_ColumnCheck, ...]] = ()
    row_checks: ClassVar[tuple[_RowCheck, ...]] = ()

    def __init_subclass__(cls, coerce: bool = False, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        columns = dict(cls.columns)
        column_checks, row_checks = list(cls.column_checks), list(cls.row_checks)
        for name, value in list(vars(cls).items()):
            if isinstance(value, Column):
                columns[name] = value if value.coerce is not None else dataclasses.replace(value, coerce=coerce)
                delattr(cls, name)  # a column is reached through ``columns``, never as an attribute
            elif isinstance(value, _ColumnCheck):
                column_checks.append(value)
            elif isinstance(value, _RowCheck):
                row_checks.append(value)
        cls.columns, cls.column_checks, cls.row_checks = columns, tuple(column_checks), tuple(row_checks)

    @classmethod
    def check(cls, frame: pd.DataFrame, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """``frame`` with its coerced columns converted; raises TableErrors with
        every failure. ``columns``: check only these of the schema's columns
        (and every row check)."""
        chosen = cls.columns if columns is None else {name: cls.columns[name] for name in columns}
        out = frame.copy()
        row_cases: list[tuple] = []
        column_cases: list[tuple] = []
        for name, column in chosen.items():
            if name not in out.columns:
                if column.required:
                    column_cases.append((None, "column_in_dataframe", name, None))
                continue
            if (out.columns == name).sum() > 1:
                column_cases.append((name, "unique_column_name", name, None))
                continue
            values, cases = _typed(name, out[name], column)
            column_cases.extend(cases)
            if values is None:
                continue
            out[name] = values
            present = values[values.notna()]
            if not column.nullable:
                column_cases.extend((name, "not_nullable", v, i) for i, v in values[values.isna()].items())
            checks = [*column.value_checks(), *((c.name, c.fn) for c in cls.column_checks if c.column == name)]
            for check_name, fn in checks:
                passed = fn(present).astype(bool)
                column_cases.extend((name, check_name, v, i) for i, v in present[~passed].items())
        for check in cls.row_checks:
            try:
                passed = check.fn(out).fillna(False).astype(bool)
            except (TypeError, ValueError, KeyError) as e:
                # it reads a column that cannot be compared: one failure of the check as a whole,
                # unless a column's own failure above already says why
                if not column_cases:
                    row_cases.append((None, check.name, f"{type(e).__name__}: {e}", None))
                continue
            row_cases.extend((None, check.name, None, i) for i in out.index[~passed.to_numpy()])
        cases = row_cases + column_cases
        if cases:
            raise TableErrors(cls.__name__, pd.DataFrame(cases, columns=CASE_COLUMNS, dtype=object))
        return out


def _typed(name: str, values: pd.Series, column: Column) -> tuple[pd.Series | None, list[tuple]]:
    """(the column as its type, or None where it cannot be; the failure cases on the way)."""
    dtype = _DTYPE_NAMES[column.dtype]
    if not column.coerce:
        if column.dtype is str and (pd.api.types.is_string_dtype(values) or pd.api.types.is_object_dtype(values)):
            other = values[values.notna() & ~values.map(lambda v: isinstance(v, str), na_action="ignore").astype(bool)]
            return (values, []) if other.empty else (None, [(name, f"dtype('{dtype}')", v, i) for i, v in other.items()])
        if str(values.dtype) == dtype:
            return values, []
        return None, [(name, f"dtype('{dtype}')", str(values.dtype), None)]
    if column.dtype is str:
        return values.astype("str").mask(values.isna()), []  # a null stays null
    if column.dtype is bool:
        return (values.astype(bool) if not values.isna().any() else values), []
    text_nan = pd.Series(False, index=values.index)
    if pd.api.types.is_datetime64_any_dtype(values) or pd.api.types.is_timedelta64_dtype(values):
        numbers = pd.Series(np.nan, index=values.index)  # a date or a duration is not a number of hours
    elif pd.api.types.is_numeric_dtype(values):
        numbers = values
    else:
        numbers = pd.to_numeric(values, errors="coerce")
        text_nan = values.map(_is_text_nan, na_action="ignore").eq(True)
    failed = values.notna() & numbers.isna() & ~text_nan
    if column.dtype is int:  # and what int64 cannot hold
        failed |= numbers.notna() & ~numbers.abs().le(np.iinfo(np.int64).max)
    cases = [(name, f"coerce_dtype('{dtype}')", v, i) for i, v in values[failed].items()]
    if cases:
        return None, cases
    if column.dtype is int and numbers.isna().any():
        return numbers, []  # nulls stay (and are reported unless nullable); an int column cannot hold them
    return numbers.astype(dtype), []


def _is_text_nan(value: Any) -> bool:
    """The text 'nan' (any case) reads as a null, as ``float('nan')`` reads it: reported as a null, not as text."""
    return isinstance(value, str) and value.strip().lower() == "nan"
