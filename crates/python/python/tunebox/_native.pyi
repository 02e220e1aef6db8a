"""Types of ``tunebox._native``, the Rust extension (``crates/python/src``).

What each function does, its units and errors are in its Rust docstring; this file gives
their shapes to type checkers. Seconds are ``float``; buffers are ``(address, length)``.
"""

from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any, TypeAlias, final

from typing_extensions import Self

_Path: TypeAlias = str | PathLike[str]
#: ``(address, length)`` of a buffer the caller keeps alive while the call runs.
_RawBuffer: TypeAlias = tuple[int, int]
#: ``(kind, path)``: kind ``inherit``, ``null``, ``capture`` or ``file`` (with its path).
_Output: TypeAlias = tuple[str, _Path | None]

__all__ = [
    "Worker",
    "SharedView",
    "serve_worker",
    "tune",
    "engine_worker",
    "serve_engine_worker",
    "PROTOCOL_VERSION",
    "__version__",
    "STRATEGIES",
    "OPS",
]

#: The package's version: the workspace's, from Cargo.toml (``tunebox.__version__``).
__version__: str
#: The version of tunebox's worker protocol this build speaks.
PROTOCOL_VERSION: int
#: The op codes of a Python call's payload, by name (``CALL``, ``LOAD``, ``RUN``, ``INIT``,
#: ``WARM``, ``BATCH``): what ``tunebox._calls`` sends.
OPS: dict[str, int]
#: The tuning engine's strategy names (``tune``'s ``strategy``), in the engine's order.
STRATEGIES: tuple[str, ...]

@final
class SharedView:
    """Shared memory of a request or a reply, seen through the buffer protocol."""

    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

@final
class Worker:
    """One worker process with TVM's ``PopenWorker`` life cycle (``worker.rs``)."""

    def __new__(
        cls,
        program: _Path,
        args: list[str],
        stdout: _Output,
        stderr: _Output,
        initializer: bytes | None = None,
        maximum_uses: int | None = None,
        init_timeout: float | None = None,
        env: list[tuple[str, str]] = ...,
    ) -> Self: ...
    def put(
        self,
        op: int,
        pickle: bytes,
        buffers: list[_RawBuffer] = ...,
        region: int = 0,
    ) -> None: ...
    def get(self, timeout: float | None = None) -> tuple[int, bytes, list[SharedView | bytearray]]:
        """``(status, pickle, buffers)``: TVM's ``StatusKind``, the reply's pickle, and its
        out-of-band buffers (``SharedView`` or ``bytes``)."""
    def load(
        self,
        pickle: bytes,
        buffers: list[_RawBuffer] = ...,
        timeout: float | None = None,
    ) -> None: ...
    def region(self) -> bytes: ...
    def preload(self, module: str) -> None: ...
    def benchmark_c(
        self,
        source: str,
        entry: str,
        args: list[tuple[Any, ...]],
        flags: list[str] | None = None,
        compiler: str | None = None,
        defines: list[tuple[str, str]] = ...,
        warmup_ms: float = 25.0,
        rep_ms: float = 100.0,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Statistics in ms and ``"outputs"``: ``[(name, dtype, shape, bytes)]``."""
    def start(self) -> None: ...
    def kill(self, respawn: bool = False) -> None: ...
    def shutdown(self) -> None: ...
    @property
    def pid(self) -> int | None: ...
    def is_alive(self) -> bool: ...
    def output_tails(self) -> tuple[str, str]: ...

def serve_worker(
    handler: Callable[
        [int, bytes, list[SharedView | bytearray]], tuple[int, bytes, list[_RawBuffer], Any]
    ],
) -> int: ...
def tune(
    manifest: str,
    path: _Path,
    files: dict[str, Any],
    worker: _Path,
    cache: _Path | None = None,
    strategy: str = ...,  # "brute-force"
    budget: int | None = None,
    fraction: float | None = None,
    seed: int = 0,
    workers: int = 1,
    max_time_s: float | None = None,
    timeout_s: float | None = None,
    on_choice: Callable[[str, str, float | None], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    max_process_uses: int | None = None,
) -> dict[str, Any]:
    """The run's report as objects (docs/cli.md's JSON schema, as ``json.loads`` gives it)."""

def engine_worker() -> Path:
    """The path of the Rust worker this extension carries, written once into tunebox's cache."""

def serve_engine_worker() -> int: ...
