"""Turns call payloads into bytes and back.

cloudpickle with pickle protocol 5: lambdas, closures and classes defined in
``__main__`` travel by value; everything importable travels by reference.

``encode``/``decode`` keep large contiguous buffers (numpy arrays, also deep
inside pytrees) out of the pickle stream, so a transport can move them without
copying them into it::

    pickled, buffers = serialization.encode({'w': np.zeros(1 << 20)})
    value = serialization.decode(pickled, buffers)

JAX arrays travel as numpy arrays (jax is never imported unless the payload
holds one); a receiver that decodes with ``device_arrays=True`` gets them
back as JAX arrays.
"""

from __future__ import annotations

import collections
import io
import pickle
import threading
import types
from typing import Any, Callable

import cloudpickle

PROTOCOL = 5
# Buffers smaller than this stay in the pickle stream: a separate buffer costs
# more bookkeeping than copying a few bytes.
OUT_OF_BAND_MIN_BYTES = 1024

_decoding = threading.local()
_STACK_GLOBAL = pickle.STACK_GLOBAL  # How protocol 5 refers to a module's name.


def dumps(obj: Any) -> bytes:
    """One self-contained ``bytes`` (for files and the control channel)."""
    stream = io.BytesIO()
    _KeepFilenames(stream, protocol=PROTOCOL).dump(obj)
    return stream.getvalue()


def loads(data: bytes | memoryview) -> Any:
    return pickle.loads(data)


def _code_keeping_its_filename(code: types.CodeType):
    """cloudpickle's reduction of a code object, with the file it came from.

    cloudpickle 3.1.3 names every function it sends by value ``<dynamic-code>``,
    so a node's log lines and tracebacks lost the script and line they point at.
    """
    rebuild, args = _CLOUDPICKLE_CODE_REDUCE(code)
    if _DYNAMIC_FILENAME in args and code.co_filename != _DYNAMIC_FILENAME:
        args = tuple(code.co_filename if arg == _DYNAMIC_FILENAME else arg for arg in args)
    return rebuild, args


_DYNAMIC_FILENAME = '<dynamic-code>'
_CLOUDPICKLE_CODE_REDUCE = cloudpickle.Pickler.dispatch_table[types.CodeType]


class _KeepFilenames(cloudpickle.Pickler):
    """cloudpickle whose functions sent by value keep their file name."""

    dispatch_table = collections.ChainMap({types.CodeType: _code_keeping_its_filename},
                                          cloudpickle.Pickler.dispatch_table)


class _Pickler(_KeepFilenames):
    """cloudpickle that sends JAX arrays as numpy arrays."""

    def reducer_override(self, obj):
        if type(obj).__module__.startswith(('jax', 'jaxlib')) and _is_jax_array(obj):
            import numpy as np
            return _rebuild_jax_array, (np.asarray(obj),)
        return super().reducer_override(obj)


def _is_jax_array(obj: Any) -> bool:
    import jax
    return isinstance(obj, jax.Array)


def _rebuild_jax_array(array):
    """numpy by default; a JAX array when the receiver decodes with ``device_arrays``."""
    if getattr(_decoding, 'device_arrays', False):
        import jax
        return jax.device_put(array)
    return array


class _LargeBuffer(Exception):
    """Raised by ``_small_only``: the payload holds a buffer to keep out of band."""


def _small_only(buffer: pickle.PickleBuffer) -> bool:
    """``encode``'s first try: small buffers in band, a large one starts again."""
    if buffer.raw().nbytes < OUT_OF_BAND_MIN_BYTES:
        return True
    raise _LargeBuffer


def encode(obj: Any) -> tuple[bytes, list[memoryview]]:
    """The pickle stream and the raw out-of-band buffers it refers to (not copied)."""
    # The C pickler first (several times faster on small calls); cloudpickle when the
    # payload needs it: something from __main__ or a JAX array (both show in the
    # stream as module names), or anything plain pickle refuses (lambdas, local classes).
    # A stream without STACK_GLOBAL names no module at all (the usual small call).
    # The first try keeps every buffer in band and stops at a large one: the usual call
    # holds none, and then makes no list or closure to collect them.
    buffers: list[memoryview] = []
    try:
        pickled = pickle.dumps(obj, protocol=PROTOCOL, buffer_callback=_small_only)
    except _LargeBuffer:
        try:
            pickled = pickle.dumps(obj, protocol=PROTOCOL, buffer_callback=_keep_large(buffers))
        except Exception:
            pickled = None
    except Exception:
        pickled = None
    if pickled is not None and (_STACK_GLOBAL not in pickled or (
            b'__main__' not in pickled and b'jax' not in pickled)):
        return pickled, buffers
    buffers.clear()
    stream = io.BytesIO()
    try:
        _Pickler(stream, protocol=PROTOCOL, buffer_callback=_keep_large(buffers)).dump(obj)
    except Exception as exc:
        raise TypeError(f'cannot serialize {_describe(obj)} for courier: {exc}') from exc
    return stream.getvalue(), buffers


def _keep_large(buffers: list) -> Callable[[pickle.PickleBuffer], bool]:
    """A ``buffer_callback`` that keeps small buffers in band and appends large ones."""
    def keep_large(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True  # In band.
        buffers.append(raw)
        return False
    return keep_large


def _describe(obj: Any) -> str:
    if isinstance(obj, tuple) and len(obj) == 3 and isinstance(obj[0], str):
        return f'the arguments of {obj[0]!r}'  # A request: (method, args, kwargs).
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == 'ok':
        return f'the result (a {type(obj[1]).__name__})'
    return f'a {type(obj).__name__}'


#: How many ``decode(device_arrays=True)`` run now, in any thread. While none does, no
#: thread's flag can be set, so a plain decode needs neither to read nor to set it: the
#: usual call then costs ``pickle.loads`` alone (callers on the hot path test this first).
device_decodes = 0
_device_decodes_lock = threading.Lock()
plain_loads = pickle.loads  # ``decode`` while ``device_decodes`` is 0 and no device arrays.


def decode(pickled: bytes | memoryview, buffers: list, *, device_arrays: bool = False) -> Any:
    """Inverse of ``encode``; arrays are built over ``buffers`` without copying."""
    if not (device_arrays or device_decodes):  # The common case: nothing to set or restore.
        return pickle.loads(pickled, buffers=buffers)
    previous = getattr(_decoding, 'device_arrays', False)
    if not (device_arrays or previous):
        return pickle.loads(pickled, buffers=buffers)
    _count_device_decodes(1)
    _decoding.device_arrays = device_arrays
    try:
        return pickle.loads(pickled, buffers=buffers)
    finally:
        _decoding.device_arrays = previous
        _count_device_decodes(-1)


def decode_reply(pickled: bytes | memoryview, buffers: list, device_arrays: bool = False) -> Any:
    """The call's value, or its remote exception raised here (a reply frame's pickle and
    buffers: a futures connection matches replies without making ``frames.Frame``s; the
    compiled loop completes a future itself for an entry decoded with this function)."""
    if device_arrays or device_decodes:
        status, value = decode(pickled, buffers, device_arrays=device_arrays)
    else:  # ``decode``'s common case, one Python call less per reply.
        status, value = plain_loads(pickled, buffers=buffers)
    if status == 'ok':
        return value
    raise value.rebuild()


def reply_value(outcome: tuple) -> Any:
    """``decode_reply`` for a reply the compiled loop unpickled (``_settle.c``): ``('ok',
    value)``, the remote ``('error', …)``, or ``('raised', exception)`` when unpickling it
    raised (``decode_reply`` would have raised that)."""
    status, value = outcome
    if status == 'ok':
        return value
    if status == 'raised':
        raise value
    raise value.rebuild()


def _count_device_decodes(step: int) -> None:
    global device_decodes
    with _device_decodes_lock:  # ``+=`` on a global is no atomic step between threads.
        device_decodes += step
