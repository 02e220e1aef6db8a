"""How calls and results travel: cloudpickle, protocol 5, large buffers out of band.

A numpy array (or any object exporting a contiguous buffer through pickle protocol 5) travels as
an out-of-band buffer: tunebox puts it in the shared-memory payload of the request instead of
pickling it, and the receiving side rebuilds the array on a writable ``bytearray``.
"""

from __future__ import annotations

import pickle
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

import cloudpickle

from tunebox import _native

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from tunebox._native import SharedView

#: What a worker or a parent receives a buffer as: a copy, or shared memory seen as it is.
_Received: TypeAlias = Union[bytes, bytearray, memoryview, "SharedView"]

# Op codes of a request, as crates/python/src/frame.rs defines them.
CALL: int = _native.OPS["CALL"]
LOAD: int = _native.OPS["LOAD"]
RUN: int = _native.OPS["RUN"]
INIT: int = _native.OPS["INIT"]
WARM: int = _native.OPS["WARM"]
BATCH: int = _native.OPS["BATCH"]

# Status codes of a reply: TVM's StatusKind.
COMPLETE = 1
EXCEPTION = 2
TIMEOUT = 3

# Buffers smaller than this stay inside the pickle: not worth a payload of their own.
_OUT_OF_BAND_BYTES = 64 * 1024

# Most out-of-band buffers of one message (tunebox allows 60 shared-memory payloads a message);
# a call with more pickles them in band.
_MAX_BUFFERS = 48


def _pickle(dump: Callable[..., bytes], obj: object) -> tuple[bytes, list[memoryview]]:
    views: list[memoryview] = []

    def keep_large(buffer: pickle.PickleBuffer) -> bool:
        view = buffer.raw()
        if view.nbytes < _OUT_OF_BAND_BYTES:
            return True  # serialized in band
        views.append(view)
        return False

    data = dump(obj, protocol=5, buffer_callback=keep_large)
    if len(views) > _MAX_BUFFERS:
        return dump(obj, protocol=5), []
    return data, views


def dumps(obj: object, fast: bool = True) -> tuple[bytes, list[memoryview]]:
    """``(pickle, views)``: protocol 5, large contiguous buffers (numpy arrays) as memoryviews
    beside it. Hand the views over with :func:`addresses`.

    The C pickler is tried first: it pickles module-level functions and plain data by
    reference, as cloudpickle would, several times faster. What it cannot pickle (lambdas,
    closures, classes made at run time) and anything that refers to ``__main__`` (which is
    another module in the worker) goes through cloudpickle, as TVM sends everything; so does all
    of it when modules are registered with ``cloudpickle.register_pickle_by_value``."""
    if fast and not _by_value_modules():
        try:
            data, views = _pickle(pickle.dumps, obj)
        except Exception:  # noqa: BLE001, S110 - cloudpickle below
            pass
        else:
            if b"__main__" not in data:
                return data, views
    return _pickle(cloudpickle.dumps, obj)


def dumps_call(
    fn: Callable[..., Any], args: object, kwargs: object, fast: bool = True
) -> tuple[bytes, list[memoryview]]:
    """:func:`dumps` of the call ``(fn, args, kwargs)``. A function that must travel by value
    (one of ``__main__``, a lambda) and whose pickle cannot change between calls (see
    :func:`_state`) is cloudpickled once per parent and unpickled once per worker process:
    each call carries its pickle's digest and bytes, and the worker keeps the function by the
    digest."""
    by_value = not fast or getattr(fn, "__module__", None) == "__main__" or _is_lambda(fn)
    if by_value and not _by_value_modules():
        cached = _cached(fn)
        if cached is not None:
            return dumps((cached, args, kwargs), True)
    return dumps((fn, args, kwargs), fast)


class _Cached:
    """A function pickled by value once: travels as its digest and its cloudpickle (base64, so
    that the pickle of the call never reads as referring to ``__main__``)."""

    __slots__ = ("digest", "data")

    def __init__(self, digest: bytes, data: bytes) -> None:
        self.digest = digest
        self.data = data

    def __reduce__(
        self,
    ) -> tuple[Callable[[bytes, bytes], Callable[..., Any]], tuple[bytes, bytes]]:
        return (cached_function, (self.digest, self.data))


# The worker's functions by digest (bounded: cleared when full).
_FUNCTIONS: dict[bytes, Callable[..., Any]] = {}
_MAX_FUNCTIONS = 256


def cached_function(digest: bytes, data: bytes) -> Callable[..., Any]:
    """The function a :class:`_Cached` carries, unpickled once per worker process."""
    fn = _FUNCTIONS.get(digest)
    if fn is None:
        import base64

        fn = pickle.loads(base64.b64decode(data))
        if len(_FUNCTIONS) >= _MAX_FUNCTIONS:
            _FUNCTIONS.clear()
        _FUNCTIONS[digest] = fn
    return fn


# The parent's cache: function -> (what its pickle depends on, its _Cached).
_PICKLED: weakref.WeakKeyDictionary[types.FunctionType, tuple[tuple[Any, ...], _Cached]] = (
    weakref.WeakKeyDictionary()
)
# Per code object: the global names it (and the code nested in it) reads, or None when it
# writes globals (a worker that kept the function would keep those writes between calls).
_CODE_NAMES: dict[types.CodeType, tuple[str, ...] | None] = {}
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def _cached(fn: object) -> _Cached | None:
    if not isinstance(fn, types.FunctionType):
        return None
    state = _state(fn)
    if state is None:
        return None
    entry = _PICKLED.get(fn)
    if entry is not None and entry[0] == state:
        return entry[1]
    import base64
    import hashlib

    data = cloudpickle.dumps(fn, protocol=5)
    cached = _Cached(hashlib.blake2b(data, digest_size=16).digest(), base64.b64encode(data))
    _PICKLED[fn] = (state, cached)
    return cached


def _state(fn: types.FunctionType) -> tuple[Any, ...] | None:
    """What ``fn``'s cloudpickle depends on, compared by identity; None when it may depend on
    more (then it is pickled afresh for every call, as TVM does). Cached are functions with no
    closure, no attributes, immutable defaults, no writes to globals, and every global they
    read a module, an immutable value or absent (a builtin)."""
    if fn.__closure__ is not None or fn.__dict__:
        return None
    defaults = (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values())
    if not all(isinstance(d, _IMMUTABLE) for d in defaults):
        return None
    names = _global_names(fn.__code__)
    if names is None:
        return None
    values = []
    for name in names:
        value = fn.__globals__.get(name, _IMMUTABLE)  # absent: a builtin, or a NameError
        if not isinstance(value, (types.ModuleType, *_IMMUTABLE)) and value is not _IMMUTABLE:
            return None
        values.append(id(value))
    return (
        fn.__code__,
        fn.__defaults__,
        fn.__kwdefaults__,
        fn.__globals__.get("__name__"),
        tuple(values),
    )


def _global_names(code: types.CodeType) -> tuple[str, ...] | None:
    """The global names ``code`` and the code nested in it read, in order; None when it writes
    globals. Kept in ``_CODE_NAMES``."""
    if code in _CODE_NAMES:
        return _CODE_NAMES[code]
    names = _read_globals(code)
    if len(_CODE_NAMES) > 4096:
        _CODE_NAMES.clear()
    _CODE_NAMES[code] = names
    return names


def _read_globals(code: types.CodeType) -> tuple[str, ...] | None:
    import dis

    found: set[str] = set()
    names: list[str] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            return None
        if instruction.opname == "LOAD_GLOBAL" and instruction.argval not in found:
            found.add(instruction.argval)
            names.append(instruction.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            nested = _global_names(const)
            if nested is None:
                return None
            for name in nested:
                if name not in found:
                    found.add(name)
                    names.append(name)
    return tuple(names)


def _is_lambda(fn: object) -> bool:
    return getattr(fn, "__name__", None) == "<lambda>"


def _by_value_modules() -> bool:
    registry = getattr(cloudpickle, "list_registry_pickle_by_value", None)
    return bool(registry()) if registry is not None else False


def dumps_inband(obj: object) -> bytes:
    """The cloudpickle of ``obj`` with every buffer inside (for the initializer)."""
    return cloudpickle.dumps(obj, protocol=5)


def dumps_result(obj: object) -> tuple[bytes, list[memoryview]]:
    """:func:`dumps` for a worker's reply: the C pickler first (several times faster for plain
    data), cloudpickle for what it cannot pickle by reference (classes and functions made in the
    task, lambdas)."""
    try:
        return _pickle(pickle.dumps, obj)
    except Exception:  # noqa: BLE001 - not picklable by reference: cloudpickle
        return dumps(obj)


def addresses(views: Sequence[memoryview]) -> list[tuple[int, int]]:
    """``[(address, length)]`` of contiguous memoryviews, for tunebox to copy into shared memory
    while the caller holds the views (and the GIL): no ``bytes`` copy first."""
    out = []
    for view in views:
        if view.nbytes == 0:
            out.append((0, 0))
            continue
        out.append((_address(view), view.nbytes))
    return out


def _address(view: memoryview) -> int:
    try:
        import numpy as np

        return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)
    except ImportError:
        import ctypes

        if view.readonly:
            raise TypeError("tunebox needs numpy to send read-only buffers out of band") from None
        return ctypes.addressof(ctypes.c_char.from_buffer(view))


def loads(data: bytes, buffers: Iterable[_Received] = ()) -> Any:
    """The object :func:`dumps` encoded. ``buffers`` are ``bytearray``s or
    ``tunebox._native.SharedView``s (shared memory received without a copy), which become
    writable memoryviews the unpickled arrays live on, keeping the mapping alive."""
    return pickle.loads(data, buffers=[_writable(b) for b in buffers])


def region_records(data: bytes) -> list[tuple[int, Any]]:
    """The records of a batch's results region (``tunebox._native.Worker.region``, written by
    :func:`write_record`): a list of ``(status, object)``. A record is ``length: u32`` (little
    endian), then ``length`` bytes (a status byte and a pickle), back to back; the records end at
    a length of 0 (the region starts zeroed, and a record's length is written last, so a worker
    that died while writing one leaves it out) or at one that runs past the region's end."""
    records: list[tuple[int, Any]] = []
    offset = 0
    while offset + 4 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "little")
        end = offset + 4 + length
        if length == 0 or end > len(data):
            break
        body = data[offset + 4 : end]
        records.append((body[0], pickle.loads(body[1:])))
        offset = end
    return records


def write_record(
    region: bytearray | memoryview, offset: int, status: int, payload: bytes
) -> int | None:
    """Appends one record to a batch's results region at ``offset`` (in the format
    :func:`region_records` reads: its bytes, then its length, so that a worker that dies part
    way leaves no half record); returns the next offset, or None when it does not fit."""
    end = offset + 5 + len(payload)
    if end + 4 > len(region):  # room for the zero length that ends the records
        return None
    region[offset + 4] = status
    region[offset + 5 : end] = payload
    region[offset : offset + 4] = (1 + len(payload)).to_bytes(4, "little")
    return end


def writable(buffer: bytearray | SharedView) -> bytearray | memoryview:
    """A writable memoryview of a buffer the worker received (see :func:`loads`)."""
    if isinstance(buffer, bytearray):
        return buffer
    return _shared_memory(buffer)


def _writable(buffer: _Received) -> bytes | bytearray | memoryview:
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return buffer
    return _shared_memory(buffer)


def _shared_memory(buffer: SharedView) -> memoryview:
    """A writable memoryview of shared memory, which keeps the mapping alive."""
    import ctypes

    memory = (ctypes.c_char * buffer.nbytes).from_address(buffer.address)
    # The mapping lives as long as the memory does.
    memory._tunebox_owner = buffer  # type: ignore[attr-defined]
    return memoryview(memory).cast("B")
