"""The engine's worker process (``tunebox-engine-worker``), started by ``tunebox._native.tune``
for ``tunebox.kernel_tuner``, never by hand.

It serves tunebox's ``cpu``, ``cuda`` and ``diagnostics`` backends through tunebox-worker's loop
(the handshake, the parent-death signal, panics and faults are tunebox-worker's); nothing in it
runs Python code of the user's.
"""

import sys


def main() -> int:
    from tunebox import _native

    return _native.serve_engine_worker()


if __name__ == "__main__":
    sys.exit(main())
