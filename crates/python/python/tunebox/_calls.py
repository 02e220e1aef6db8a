"""How calls and results travel: cloudpickle, protocol 5, large buffers out of band.

A numpy array (or any object exporting a contiguous buffer through pickle protocol 5) travels as
an out-of-band buffer: tunebox puts it in the shared-memory payload of the request instead of
pickling it, and the receiving side rebuilds the array on a writable ``bytearray``.
"""

import pickle

import cloudpickle

# Op codes of a request (crates/python/src/frame.rs).
CALL = 0
LOAD = 1
RUN = 2
INIT = 3
WARM = 4
BATCH = 5

# Status codes of a reply: TVM's StatusKind.
COMPLETE = 1
EXCEPTION = 2
TIMEOUT = 3

# Buffers smaller than this stay inside the pickle: not worth a payload of their own.
_OUT_OF_BAND_BYTES = 64 * 1024

# Most out-of-band buffers of one message (tunebox allows 60 shared-memory payloads a message);
# a call with more pickles them in band.
_MAX_BUFFERS = 48


def _pickle(dump, obj):
    views = []

    def keep_large(buffer):
        view = buffer.raw()
        if view.nbytes < _OUT_OF_BAND_BYTES:
            return True  # serialized in band
        views.append(view)
        return False

    data = dump(obj, protocol=5, buffer_callback=keep_large)
    if len(views) > _MAX_BUFFERS:
        return dump(obj, protocol=5), []
    return data, views


def dumps(obj, fast=True):
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


def _by_value_modules():
    registry = getattr(cloudpickle, "list_registry_pickle_by_value", None)
    return bool(registry()) if registry is not None else False


def dumps_inband(obj):
    """The cloudpickle of ``obj`` with every buffer inside (for the initializer)."""
    return cloudpickle.dumps(obj, protocol=5)


def dumps_result(obj):
    """:func:`dumps` for a worker's reply: the C pickler first (several times faster for plain
    data), cloudpickle for what it cannot pickle by reference (classes and functions made in the
    task, lambdas)."""
    try:
        return _pickle(pickle.dumps, obj)
    except Exception:  # noqa: BLE001 - not picklable by reference: cloudpickle
        return dumps(obj)


def addresses(views):
    """``[(address, length)]`` of contiguous memoryviews, for tunebox to copy into shared memory
    while the caller holds the views (and the GIL): no ``bytes`` copy first."""
    out = []
    for view in views:
        if view.nbytes == 0:
            out.append((0, 0))
            continue
        out.append((_address(view), view.nbytes))
    return out


def _address(view):
    try:
        import numpy as np

        return np.frombuffer(view, dtype=np.uint8).ctypes.data
    except ImportError:
        import ctypes

        if view.readonly:
            raise TypeError("tunebox needs numpy to send read-only buffers out of band") from None
        return ctypes.addressof(ctypes.c_char.from_buffer(view))


def loads(data, buffers=()):
    """The object :func:`dumps` encoded. ``buffers`` are ``bytearray``s or
    ``tunebox._native.SharedView``s (shared memory received without a copy), which become
    writable memoryviews the unpickled arrays live on, keeping the mapping alive."""
    return pickle.loads(data, buffers=[_writable(b) for b in buffers])


def region_records(data):
    """The records of a batch's results region (``tunebox._native.Worker.region``): a list of
    ``(status, object)``."""
    records = []
    offset = 0
    while offset + 4 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "little")
        if length == 0:
            break
        body = data[offset + 4 : offset + 4 + length]
        records.append((body[0], pickle.loads(body[1:])))
        offset += 4 + length
    return records


def write_record(region, offset, status, payload):
    """Appends one record to a batch's results region at ``offset`` (its bytes, then its length,
    so that a worker that dies part way leaves no half record); returns the next offset, or None
    when it does not fit."""
    end = offset + 5 + len(payload)
    if end + 4 > len(region):  # room for the zero length that ends the records
        return None
    region[offset + 4] = status
    region[offset + 5 : end] = payload
    region[offset : offset + 4] = (1 + len(payload)).to_bytes(4, "little")
    return end


def writable(buffer):
    """A writable memoryview of a buffer the worker received (see :func:`loads`)."""
    return _writable(buffer)


def _writable(buffer):
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return buffer
    import ctypes

    memory = (ctypes.c_char * buffer.nbytes).from_address(buffer.address)
    memory._tunebox_owner = buffer  # the mapping lives as long as the memory does
    return memoryview(memory).cast("B")
