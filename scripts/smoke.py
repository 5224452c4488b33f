"""What a notebook user does first, against an *installed* nbmp (``make wheel-check``
runs it in a fresh virtualenv per Python, outside the checkout): a Pool with a lambda,
spawn with return values, a shared array filled by workers, and doctor. Exits non-zero
on any difference, and refuses to run against a checkout's nbmp."""

from __future__ import annotations

import os
import sys
import sysconfig

import numpy as np

import nbmp


def main() -> int:
    where = os.path.realpath(nbmp.__file__)
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert where.startswith(site + os.sep), f"nbmp imported from {where}, not from the installed wheel in {site}"

    with nbmp.Pool(2) as pool:
        assert pool.map(lambda x: x * x, range(8)) == [0, 1, 4, 9, 16, 25, 36, 49]

    assert nbmp.spawn(lambda rank, base: base + rank, args=(10,), nprocs=2) == [10, 11]

    shared = nbmp.zeros((4, 3))

    def fill(rank: int, out: np.ndarray) -> None:
        out[rank] = rank + 1

    nbmp.spawn(fill, args=(shared,), nprocs=4)
    assert shared.tolist() == [[1.0] * 3, [2.0] * 3, [3.0] * 3, [4.0] * 3], shared
    del shared

    report = nbmp.doctor()
    assert "nbmp doctor" in str(report), report

    print(f"smoke ok: nbmp {nbmp.__version__} from {where} on Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
