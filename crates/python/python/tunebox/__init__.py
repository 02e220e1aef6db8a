"""tunebox from Python: TVM's and Inductor's worker pools over tunebox's isolated workers.

Submodules (imported on demand, so that a worker starts fast):

- ``tunebox.popen_pool``: ``PopenWorker``, ``PopenPoolExecutor``, ``StatusKind``, ``MapResult``,
  drop-ins for ``tvm.support.popen_pool``.
- ``tunebox.benchmark``: ``TuningProcessPool``, Inductor-style: one worker per device, each choice
  timed as triton's ``do_bench`` times it, a failed choice ``inf``.
- ``tunebox.kernel_tuner``: ``tune_kernel``, Kernel Tuner's signature (C, C++ and CUDA
  kernels), run by tunebox's tuning engine (``tunebox_tune::tune``).

The worker processes, their deadlines, process-group kill, reaping, crash reports and shared
memory are tunebox's (Rust, ``tunebox._native``); the workers are Python interpreters running
``python -m tunebox._worker``.
"""

from __future__ import annotations

# The package's version is the workspace's (Cargo.toml), compiled into the extension.
from tunebox._native import __version__ as __version__

# Not `typing.TYPE_CHECKING`: importing `typing` would cost the engine's worker launcher
# (`python -IS`, which imports this package) several milliseconds at every start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from tunebox import benchmark, kernel_tuner, popen_pool

__all__ = ["popen_pool", "benchmark", "kernel_tuner"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        import importlib

        return importlib.import_module(f"tunebox.{name}")
    raise AttributeError(f"module 'tunebox' has no attribute {name!r}")
