"""joblib's ``Parallel`` and scikit-learn's ``n_jobs`` on the ``"nbmp"`` backend (``import nbmp.joblib``)."""

from __future__ import annotations

import os

import pytest

joblib = pytest.importorskip("joblib")
import nbmp.joblib  # noqa: E402,F401  (registers the backend)
from joblib import Parallel, delayed  # noqa: E402

import nbmp  # noqa: E402
from helpers import run_main  # noqa: E402


def test_parallel_runs_lambdas_and_cell_functions_in_nbmp_workers() -> None:
    out = run_main("""
        import os, joblib, nbmp.joblib
        from joblib import Parallel, delayed
        scale = 3
        def work(x):  # a __main__ function, as a cell defines it
            return x * scale, os.getpid(), os.getppid()
        done = Parallel(n_jobs=2, backend="nbmp")(delayed(work)(i) for i in range(6))
        assert [value for value, _, _ in done] == [0, 3, 6, 9, 12, 15], done
        assert {parent for _, _, parent in done} == {os.getpid()} and os.getpid() not in {pid for _, pid, _ in done}
        with joblib.parallel_config(backend="nbmp", n_jobs=2):
            print(Parallel()(delayed(lambda x: -x)(i) for i in range(4)))
    """)
    assert out.strip() == "[0, -1, -2, -3]"


def test_one_job_runs_here_as_joblib_does() -> None:
    assert Parallel(n_jobs=1, backend="nbmp")(delayed(os.getpid)() for _ in range(2)) == [os.getpid()] * 2


def test_a_task_error_is_raised_and_a_dead_worker_fails_the_call() -> None:
    with pytest.raises(ZeroDivisionError):
        Parallel(n_jobs=2, backend="nbmp")(delayed(lambda x: 1 / x)(i) for i in range(4))
    with pytest.raises(nbmp.WorkerLostError, match="exited with code 3"):  # the standard Pool would hang here
        Parallel(n_jobs=2, backend="nbmp")(delayed(lambda i: os._exit(3) if i == 1 else i)(i) for i in range(4))


def test_the_backends_options_are_the_pools() -> None:
    with joblib.parallel_config(backend="nbmp", maxtasksperchild=1):
        assert len(set(Parallel(n_jobs=2, batch_size=1)(delayed(os.getpid)() for _ in range(4)))) == 4
    with pytest.raises(TypeError, match="bogus"), joblib.parallel_config(backend="nbmp", bogus=1):
        Parallel(n_jobs=2)(delayed(abs)(i) for i in range(2))


def test_scikit_learn_fits_on_the_nbmp_backend() -> None:
    sklearn = pytest.importorskip("sklearn")  # noqa: F841
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_val_score

    X, y = make_classification(120, random_state=0)
    alone = cross_val_score(LogisticRegression(), X, y, cv=3)
    with joblib.parallel_config(backend="nbmp", n_jobs=2):
        assert list(cross_val_score(LogisticRegression(), X, y, cv=3)) == list(alone)
        search = GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3).fit(X, y)
    assert search.best_params_ == GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3).fit(X, y).best_params_
