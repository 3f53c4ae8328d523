"""Build kio entities for whichever version a request came in at.

kio generates one class per message *and version*, each with only that version's fields.
Handlers describe a response once, with every field any version may carry; :func:`make`
keeps the fields the requested version's class has and drops the rest, so one handler
serves a whole version range. A field missing from the call but required by the class is
a programming error and fails loudly.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
from functools import cache
from types import ModuleType
from typing import Any, TypeVar, cast

T = TypeVar("T")

ZERO_THROTTLE = datetime.timedelta(0)


@cache
def response_module(api: str, version: int) -> ModuleType:
    return importlib.import_module(f"kio.schema.{api}.v{version}.response")


@cache
def _fields(cls: Any) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type[T], **values: Any) -> T:
    names = _fields(cast(Any, cls))
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(module: ModuleType, name: str, **values: Any) -> Any:
    """``make`` for a nested entity that only some versions have: None when this
    version's module lacks it (the parent's :func:`make` then drops the field too)."""
    cls = getattr(module, name, None)
    return None if cls is None else make(cls, **values)
