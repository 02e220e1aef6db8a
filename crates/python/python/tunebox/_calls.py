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

# Status codes of a reply: TVM's StatusKind.
COMPLETE = 1
EXCEPTION = 2
TIMEOUT = 3

# Buffers smaller than this stay inside the pickle: not worth a part of their own.
_OUT_OF_BAND_BYTES = 64 * 1024


def dumps(obj):
    """``[pickle, buffer, ...]`` as ``bytes``: cloudpickle with protocol 5."""
    buffers = []

    def keep_large(buffer):
        view = buffer.raw()
        if view.nbytes < _OUT_OF_BAND_BYTES:
            return True  # serialized in band
        buffers.append(view)
        return False

    data = cloudpickle.dumps(obj, protocol=5, buffer_callback=keep_large)
    return [data] + [bytes(view) for view in buffers]


def dumps_result(obj):
    """:func:`dumps` for a worker's reply: the C pickler first (several times faster for plain
    data), cloudpickle for what it cannot pickle by reference (classes and functions made in the
    task, lambdas)."""
    buffers = []

    def keep_large(buffer):
        view = buffer.raw()
        if view.nbytes < _OUT_OF_BAND_BYTES:
            return True
        buffers.append(view)
        return False

    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=keep_large)
    except Exception:  # noqa: BLE001 - not picklable by reference: cloudpickle
        return dumps(obj)
    return [data] + [bytes(view) for view in buffers]


def loads(data, buffers=()):
    """The object :func:`dumps` encoded (``buffers`` as it returned them, or ``bytearray``s)."""
    return pickle.loads(data, buffers=buffers)
