"""``mirl.cli.threads``: torch's threads lowered to the free cores, never raised, left alone when the user chose."""

import os

import pytest
import torch

from mirl.cli import threads


@pytest.fixture
def machine(monkeypatch):
    """A 4-core machine whose load average the test sets; torch's thread count restored after."""
    before = torch.get_num_threads()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for name in threads.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    torch.set_num_threads(4)
    yield lambda load: monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    torch.set_num_threads(before)


def test_a_busy_machine_gets_fewer_threads_and_is_told(machine):
    machine(2.6)  # 4 cores - round(2.6) = 1 free
    note = threads.fit_threads()
    assert torch.get_num_threads() == 1
    assert note.startswith("scoring with 1 torch thread, not 4: the load average 2.6 leaves 1 of 4 cores free")


def test_an_idle_machine_keeps_its_threads(machine):
    machine(0.4)
    assert threads.fit_threads() is None and torch.get_num_threads() == 4


def test_the_users_thread_setting_wins(machine, monkeypatch):
    machine(9.0)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert threads.fit_threads() is None and torch.get_num_threads() == 4
