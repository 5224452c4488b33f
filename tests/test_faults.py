"""The fault-injection suite's short run (the long one: ``make fault-campaign``): interrupts at
random moments of every call's life, a ``%%nbmp`` cell interrupted in a real kernel, and SIGKILL
of a busy parent at random moments. Seeds are fixed, so a failure names a trial that can be
re-run (scripts/fault_campaign.py holds the trials; docs/reliability.md the figures)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest

import nbmp
from kernel import ROOT as ROOT_DIR
from nbmp._sharing import _client
from nbmp._sharing._ledger import live_segments

sys.path.insert(0, os.path.join(ROOT_DIR, "scripts"))
import fault_campaign as campaign  # noqa: E402

SEED = 17
TRIALS = 3  # per scenario: about 30 interrupts and 8 kills in all
# The campaign reports the real distribution; on a loaded 2-core machine the short run allows more.
ERROR_BOUND = 3.0


def _check(trials, allow=()):
    assert trials, "no trial ran"
    for trial in trials:
        problems = [p for p in trial.problems if not p.startswith(tuple(allow))]
        assert not problems, f"{trial}: {'; '.join(problems)}"
        if trial.error_s is not None:
            assert trial.error_s < ERROR_BOUND, f"{trial}: the KeyboardInterrupt came late"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("scenario", [s for s in campaign.SCENARIOS if s != "shm-transfer"])
def test_an_interrupt_at_a_random_moment_is_raised_and_leaves_nothing(scenario):
    trials = campaign.interrupt_trials(scenario, TRIALS, SEED)
    _check(trials)
    assert sum(t.outcome == "interrupted" for t in trials) >= TRIALS - 1, [str(t) for t in trials]


@pytest.mark.timeout(240)
def test_an_interrupt_during_shared_memory_transfers():
    trials = campaign.interrupt_trials("shm-transfer", TRIALS, SEED)
    # Known limits (docs/reliability.md): an interrupt that lands in an array's finalizer is
    # printed and dropped by Python; one inside a put's pickling orphans that message's segments.
    _check(trials, allow=("lost interrupt", "printed", "leaked"))
    for trial in trials:
        assert trial.outcome == "interrupted" or trial.in_finalizer, str(trial)
        assert sum(trial.leaked.values()) <= 3 << 20, f"{trial}: more than one message's arrays leaked"


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_an_interrupted_nbmp_cell_in_a_real_kernel(kernel):
    _check(campaign.kernel_trials(kernel, TRIALS, SEED))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["pool", "spawn"])
def test_workers_and_segments_go_with_a_parent_killed_at_a_random_moment(kind, strategy):
    for i in range(2):
        _check([campaign.kill_trial(kind, strategy, "fork", SEED + i)])


# --------------------------------------------------------------------------
# Bugs the campaign found, pinned
# --------------------------------------------------------------------------


def test_an_interrupt_between_a_janitor_request_and_its_reply_loses_no_reply(monkeypatch):
    # Found by the shm-transfer scenario: the reply left in the socket was read as the answer
    # to the next request ("not enough values to unpack" from live_segments, or a wrong fd).
    kept = nbmp.zeros(1000, dtype="uint8")
    expected = live_segments()
    real = socket.recv_fds

    def interrupted(*args):
        monkeypatch.setattr(socket, "recv_fds", real)
        os.kill(os.getpid(), signal.SIGINT)  # the interrupt button, while the reply is on its way
        time.sleep(0.2)
        return real(*args)

    monkeypatch.setattr(socket, "recv_fds", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever an earlier test left
    try:
        with pytest.raises(KeyboardInterrupt):
            _client.request(_client.tree_root(), "stat\n")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert live_segments() == expected
    del kept
