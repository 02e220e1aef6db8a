"""How numpy arrays and scalars travel to the engine, one table for every caller.

The engine's tensors are ``f32``, ``f64``, ``i32``, ``i64`` or ``u8`` (its ``DType``), and its
scalars ``i32``, ``i64``, ``f32`` or ``f64``. Kernel Tuner's C backend takes every numpy integer
width besides (``int8``, ``int16``, ``uint16``, ``uint32``, ``uint64``): those travel as the
engine's type of their size with their bits unchanged (``uint32`` as ``i32``, ``int16`` as two
``u8``), which changes nothing the engine does with them, as it compares every integer tensor
byte for byte and a C kernel gets its arrays untyped. A wrong answer in such an array is
reported at the engine's element: for ``int16`` and ``uint16``, the byte (element = byte // 2),
an ``int8``'s value as the unsigned byte, a ``uint32``'s or ``uint64``'s as the signed
integer of the same bits; the
message then says so in the array's own terms (:func:`in_numpy_terms`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# numpy dtype name -> (engine dtype, engine elements per numpy element).
_ARRAYS: dict[str, tuple[str, int]] = {
    "float32": ("f32", 1),
    "float64": ("f64", 1),
    "int32": ("i32", 1),
    "int64": ("i64", 1),
    "uint8": ("u8", 1),
    "int8": ("u8", 1),
    "uint32": ("i32", 1),
    "uint64": ("i64", 1),
    "int16": ("u8", 2),
    "uint16": ("u8", 2),
}

# numpy scalar dtype name -> engine scalar type. An integer scalar travels in a 64-bit slot
# with its value: a C kernel converts it to its parameter's type, a CUDA kernel reads the low
# bytes of its size, so a narrower integer needs no type of its own. `uint64` beyond `int64`
# travels as the signed value of the same bits (the same 64 bits in the slot).
_SCALARS: dict[str, str] = {
    "int32": "i32",
    "int64": "i64",
    "float32": "f32",
    "float64": "f64",
    "int8": "i64",
    "int16": "i64",
    "uint8": "i64",
    "uint16": "i64",
    "uint32": "i64",
    "uint64": "i64",
}

ARRAY_TYPES = ", ".join(_ARRAYS)
"""The numpy array dtypes accepted, for messages."""

SCALAR_TYPES = ", ".join(f"numpy.{name}" for name in _SCALARS)
"""The numpy scalar types accepted, for messages."""


def array_kind(dtype: Any) -> tuple[str, int] | None:
    """The engine dtype a numpy array of ``dtype`` travels as and how many of its elements one
    numpy element is; ``None`` for a dtype the engine cannot carry (``float16``, ``complex64``,
    ``bool``, structured types)."""
    return _ARRAYS.get(getattr(dtype, "name", ""))


def scalar(value: Any) -> tuple[str, int | float] | None:
    """The engine's scalar type and value for a numpy scalar; ``None`` for another type."""
    import numpy as np

    if not isinstance(value, np.generic):
        return None
    kind = _SCALARS.get(value.dtype.name)
    if kind is None:
        return None
    if value.dtype.name == "uint64":
        return kind, int(np.asarray(value).view(np.int64))
    return kind, value.item()


# The engine's account of a wrong answer: "first: arg3[14] is 215, expected 216".
_FIRST_MISMATCH = re.compile(r"first: arg(\d+)\[(\d+)\] is ")


def in_numpy_terms(error: str | None, arguments: Sequence[Any]) -> str | None:
    """``error`` with a note on the first mismatch it names when that array travelled as
    another type: which element of the numpy array the engine's element is, or that the
    values are its bits read as a signed integer. Unchanged otherwise."""
    found = _FIRST_MISMATCH.search(error or "")
    if error is None or found is None:
        return error
    index, element = int(found.group(1)), int(found.group(2))
    dtype = getattr(arguments[index], "dtype", None) if index < len(arguments) else None
    kind = array_kind(dtype)
    if kind is None or dtype is None:
        return error
    if kind[1] > 1:
        return (
            f"{error} (arg{index} is {dtype.name}, compared byte for byte: that is byte "
            f"{element % kind[1]} of element {element // kind[1]})"
        )
    if dtype.name in _REINTERPRETED:
        return f"{error} (arg{index} is {dtype.name}: the values are its bits read as {kind[0]})"
    return error


# The arrays that travel as an engine type of their size whose values read otherwise.
_REINTERPRETED = ("int8", "uint32", "uint64")
