"""Turns call payloads into bytes and back.

cloudpickle with pickle protocol 5: lambdas, closures and classes defined in
``__main__`` travel by value; everything importable travels by reference.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

PROTOCOL = 5


def dumps(obj: Any) -> bytes:
    return cloudpickle.dumps(obj, protocol=PROTOCOL)


def loads(data: bytes | memoryview) -> Any:
    return pickle.loads(data)
