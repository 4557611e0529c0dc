"""numba's compiled functions, cached on disk where numba can write its cache, in memory where not.

`numba.njit(cache=True)` keeps each compiled function beside its source (`__pycache__`) or in the
user's cache folder (`NUMBA_CACHE_DIR`, else under `HOME`). Where neither can be written (an
install on a read-only file system, a container with no home) numba refuses the function as it is
defined, so importing the module fails: "cannot cache function ...: no locator available". Every
compiled function of the package is defined through `njit` here, which asks for the cache and,
where none can be written, compiles the function in each process instead: the same machine code,
its compile time paid at each start rather than once.
"""
from __future__ import annotations

from typing import Callable

import numba


def njit(**options) -> Callable:
    """`numba.njit(cache=True, **options)`, or without the cache where numba has none."""

    def decorate(function: Callable) -> Callable:
        try:
            return numba.njit(cache=True, **options)(function)
        except RuntimeError as error:
            if "no locator available" not in str(error):
                raise
            return numba.njit(**options)(function)

    return decorate
