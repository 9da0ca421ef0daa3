"""Nested values (Parquet structs, lists of structs and maps; Avro records, arrays of records and
maps) delivered as flat fields, the same way for both formats: the name of each leaf
(`flat_name`) and values as the Validator takes them (`plain_value`)."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any


def flat_name(parent: str, child: str) -> str:
    """The field name of a nested value: `parent.child` (`parent` itself for an empty child)."""
    return f"{parent}.{child}" if child else parent


def plain_value(value: Any) -> Any:
    """A value as the Validator takes it: dates and times as ISO 8601 text, decimals and UUIDs
    as text, lists element-wise; anything else unchanged."""
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    return value
