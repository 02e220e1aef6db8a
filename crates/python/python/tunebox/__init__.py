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

__all__ = ["popen_pool", "benchmark", "kernel_tuner"]
__version__ = "0.1.0"


def __getattr__(name):
    if name in __all__:
        import importlib

        return importlib.import_module(f"tunebox.{name}")
    raise AttributeError(f"module 'tunebox' has no attribute {name!r}")
