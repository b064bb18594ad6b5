"""The clock of a program run (dawnpipe.programs.clock), the test items kept
back from it (dawnpipe.programs.heldback) and the freeze that holds it while
dawnpipe scores (dawnpipe.programs.freezer): the rules of docs/rules.md,
"Program entries", checked on timelines and processes built here."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dawnpipe.programs import clock, heldback
from dawnpipe.programs.clock import ClockRule, Freeze, Window
from dawnpipe.programs.freezer import DeviceWatch, Freezer, become_subreaper


# ------------------------------------------------------------------ the clock
def at(t: float, offset: float = 100.0) -> tuple[float, float]:
    """(dawnpipe's stamp, the program's time_ms) of one moment: the program's clock ``offset`` seconds ahead."""
    return t, (t + offset) * 1000.0


def test_union_counts_each_second_once():
    assert clock.union([(0, 2), (1, 3), (5, 6), (5.5, 5.7)], 0, 10) == [(0, 3), (5, 6)]
    assert clock.covered([(0, 2), (1, 3), (5, 6)], 1, 5.5) == pytest.approx(2.5)
    assert clock.covered([(-5, -1), (11, 12)], 0, 10) == 0.0


def test_a_freeze_inside_the_next_evaluation_window_is_taken_off_once():
    """Contract 1: the freeze for epoch 1 (caused by its eval_stop at 11.0) lands inside epoch 2's evaluation
    window (11.3 to 13.0), because epoch 2 trained for 0.1 s and its events came in one burst. Taking the
    window and the freeze off separately took the freeze off twice; the union takes it off once."""
    rule = ClockRule(1, bounds={1: 5.0, 2: 5.0})
    rule.windows = [Window(1, at(10.0), at(11.0)), Window(2, at(11.3), at(13.0))]
    rule.freezes = [Freeze(11.5, 12.5, 11.0, at(11.0)[1], 1)]
    ours, theirs = rule.training_seconds(at(0.0), at(13.0))  # to epoch 2's hand-over (its eval_stop)
    trained = 10.0 + (11.3 - 11.0)  # epoch 1, and epoch 2's short training between the windows
    assert ours == pytest.approx(trained, abs=1e-9)
    assert theirs == pytest.approx(ours, abs=1e-9)  # the freeze lands on the program's clock at the same place
    naive = 13.0 - (1.0 + 1.7) - 1.0  # the old rule: every window and every pause taken off on its own
    assert naive < ours


def test_a_program_that_trains_for_no_time_gets_zero_not_less():
    rule = ClockRule(1, bounds={1: 10.0})
    rule.windows = [Window(1, at(0.0), at(2.0))]
    rule.freezes = [Freeze(0.5, 3.0, 0.4, at(0.4)[1], 1)]
    assert rule.training_seconds(at(0.0), at(2.0)) == (0.0, 0.0)
    assert rule.training_seconds(at(5.0), at(2.0)) == (0.0, 0.0)  # a hand-over before run_start: nothing


def test_contract_2_keeps_the_programs_own_evaluation_on_the_clock():
    rule = ClockRule(2, bounds={1: 100.0})
    rule.windows = [Window(1, at(4.0), at(6.0))]
    rule.freezes = [Freeze(3.0, 3.5, 3.0, at(3.0)[1], 1)]
    ours, _ = rule.training_seconds(at(0.0), at(10.0))
    assert ours == pytest.approx(10.0 - 0.5)


def test_a_contract_1_window_beyond_its_bound_is_on_the_clock():
    """A window is off the clock up to evaluation_factor x dawnpipe's scoring + slack; training hidden beyond that counts."""
    bound = clock.evaluation_bound(2.0, 0.25)
    assert bound == pytest.approx(2.0 * 0.25 + clock.EVALUATION_SLACK_S)
    rule = ClockRule(1, bounds={1: bound})
    rule.windows = [Window(1, at(5.0), at(9.0))]
    ours, _ = rule.training_seconds(at(0.0), at(9.0))
    assert ours == pytest.approx(9.0 - bound)
    parts = rule.parts(0.0, 9.0)
    assert parts["evaluation_counted_seconds"] == pytest.approx(4.0 - bound) and parts["evaluation_off_clock_seconds"] == pytest.approx(bound)


def test_a_freeze_is_placed_on_the_programs_clock_by_the_offset_at_its_cause():
    """The program's clock runs 100 s ahead and the line that caused the freeze arrived 0.2 s after the
    program wrote it: on the program's clock the freeze begins 0.2 s later than where dawnpipe's offset at
    arrival would put it, so both clocks take off the same seconds of the program's life."""
    f = Freeze(start=5.0, end=6.0, cause_stamp=4.9, cause_time_ms=(4.7 + 100.0) * 1000.0, epoch=1)
    ((a, b),) = f.spans(1)
    assert (a, b) == pytest.approx((104.8, 105.8))


def test_the_export_of_handed_over_weights_is_on_the_clock_on_both_clocks():
    """The freeze after epoch 1's epoch_stop (3.0 to 5.0) held 1.2 s in which the program's factory turned its
    weights into a model file (3.2 to 4.4): that is the program's work, so only the other 0.8 s are off the
    clock, on dawnpipe's clock and, shifted by the offset at its cause, on the program's."""
    rule = ClockRule(2)
    rule.freezes = [Freeze(3.0, 5.0, 3.0, at(3.0)[1], 1, exports=((3.2, 4.4),))]
    ours, theirs = rule.training_seconds(at(0.0), at(10.0))
    assert ours == pytest.approx(10.0 - 0.8) and theirs == pytest.approx(ours)
    assert rule.parts(0.0, 10.0)["freeze_seconds"] == pytest.approx(0.8)
    assert clock.covered(rule.exports(), 0.0, 10.0) == pytest.approx(1.2)  # run.json's program.time.export_seconds
    assert Freeze(3.0, 5.0, 3.0, 3000.0, 1, exports=((2.0, 6.0),)).spans(0) == []  # an export as long as the freeze: none of it off
    two = Freeze(3.0, 5.0, 3.0, 3000.0, 2, exports=((3.1, 3.4), (4.0, 4.5)))  # two epochs taken in one freeze
    assert [x for span in two.spans(0) for x in span] == pytest.approx([3.0, 3.1, 3.4, 4.0, 4.5, 5.0])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), max_size=8),
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10), st.floats(0, 5)), max_size=8),
    st.floats(0, 120),
    st.sampled_from([1, 2]),
)
def test_the_clock_is_never_negative_nor_longer_than_the_wall(freezes, windows, stop, contract):
    rule = ClockRule(contract)
    rule.freezes = [Freeze(a, a + d, a, a * 1000.0, 1) for a, d in freezes]
    rule.windows = [Window(i, at(a, 0.0), at(a + d, 0.0)) for i, (a, d, _) in enumerate(windows)]
    rule.bounds = {i: bound for i, (_, _, bound) in enumerate(windows)}
    ours, theirs = rule.training_seconds(at(0.0, 0.0), at(stop, 0.0))
    assert 0.0 <= ours <= stop + 1e-9 and 0.0 <= theirs <= stop + 1e-9
    assert ours == pytest.approx(theirs, abs=1e-6)  # one clock, the same times


def test_start_up_beyond_its_cpu_allowance_is_counted_by_its_share_of_the_wall_time():
    assert clock.startup_excess(30.0, cpu_seconds=4.0, allowance_cpu_seconds=10.0) == 0.0  # a loaded machine: slow, little work
    assert clock.startup_excess(30.0, cpu_seconds=20.0, allowance_cpu_seconds=10.0) == pytest.approx(15.0)
    assert clock.startup_excess(30.0, cpu_seconds=0.0, allowance_cpu_seconds=0.0) == 0.0
    assert not clock.excess_unranks(1.0, ranked_seconds=0.0)
    assert clock.excess_unranks(1.5, ranked_seconds=10.0)
    assert not clock.excess_unranks(1.5, ranked_seconds=100.0)


# ------------------------------------------------------------------ test items kept back
def test_the_kept_items_are_a_share_of_every_class_drawn_per_run():
    labels = np.repeat(np.arange(10), [1000] * 9 + [3])
    kept = heldback.draw(labels, 0.2, "fastnet/seed0")
    per_class = np.bincount(labels[kept], minlength=10)
    assert list(per_class) == [200] * 9 + [1]
    assert np.array_equal(kept, heldback.draw(labels, 0.2, "fastnet/seed0"))  # the same run: the same items (a resumed run sees its data again)
    assert not np.array_equal(kept, heldback.draw(labels, 0.2, "fastnet/seed1"))
    assert len(heldback.draw(np.array([0, 1, 1]), 0.5, "x")) == 1  # a class of one item stays given; never all of a class
    assert len(heldback.draw(labels, 0.0, "x")) == 0
    given = heldback.given_indices(len(labels), kept)
    assert len(given) + len(kept) == len(labels) and not set(given) & set(kept)


def test_the_hypergeometric_is_exact():
    pmf = heldback.hypergeometric_pmf(population=10, successes=4, draws=3)
    brute = np.zeros(4)
    for chosen in itertools.combinations(range(10), 3):
        brute[sum(1 for i in chosen if i < 4)] += 1
    assert pmf == pytest.approx(brute / brute.sum())
    assert heldback.kept_correct_pmf([10, 10], [4, 7], [3, 2]).sum() == pytest.approx(1.0)


def test_the_false_alarm_rate_is_at_most_alpha_over_every_draw():
    """Every stratified draw of a small split enumerated: for a model no better on the given items, the
    share of draws on which the test fires is at most alpha (here a large alpha, so that some draws fire)."""
    labels = np.array([0] * 6 + [1] * 6)
    correct = np.array([1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0], dtype=bool)
    alpha = 0.1
    fired = total = 0
    for k0 in itertools.combinations(range(6), 2):
        for k1 in itertools.combinations(range(6, 12), 2):
            verdict = heldback.memorisation_test(correct, labels, np.array(k0 + k1), alpha=alpha)
            fired += verdict.memorised
            total += 1
    assert total == 225 and 0 < fired / total <= alpha


def test_a_memorised_given_part_is_caught_and_an_honest_model_is_not():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 1000)
    kept = heldback.draw(labels, 0.2, "e/seed0")
    honest = rng.random(10_000) < 0.9
    assert not heldback.memorisation_test(honest, labels, kept).memorised
    memorised = honest.copy()
    given = heldback.given_indices(len(labels), kept)
    memorised[given] |= rng.random(len(given)) < 0.5  # half of what it got wrong of the items it was given, learnt
    verdict = heldback.memorisation_test(memorised, labels, kept)
    assert verdict.memorised and verdict.given_accuracy > verdict.kept_accuracy and verdict.p_value <= heldback.ALPHA


def test_what_the_docs_say_the_test_catches():
    """docs/rules.md: 2,000 of Fashion-MNIST's 10,000 kept back at about 90% accuracy fire above a gap of
    about 2.4 points; with a test_limit of 500 (100 kept) the smallest gap is several times that."""
    assert heldback.smallest_gap(1000, 10, 200, 90.0) == pytest.approx(2.375, abs=0.01)
    assert heldback.smallest_gap(50, 10, 10, 90.0) > 10.0


# ------------------------------------------------------------------ the freeze
SPIN = "import time\nwhile True:\n    sum(range(10000))\n"
FAMILY = (
    "import os, subprocess, sys, time\n"
    "spin = " + repr(SPIN) + "\n"
    "subprocess.Popen([sys.executable, '-c', spin], start_new_session=True)\n"  # leaves the process group
    "if os.fork() == 0:\n"  # a double fork: an orphan, re-parented to dawnpipe (the subreaper)
    "    subprocess.Popen([sys.executable, '-c', spin])\n"
    "    os._exit(0)\n"
    "print('ready', flush=True)\n"
    "exec(spin)\n"
)


def _family(freezer: Freezer) -> subprocess.Popen:
    proc = subprocess.Popen([*freezer.launch_prefix(), sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, start_new_session=True)
    freezer.started(proc.pid)
    assert proc.stdout.readline().strip() == b"ready"
    deadline = time.time() + 60
    while len(freezer.tree()) < 3 and time.time() < deadline:  # the root, the setsid child, the orphan's child
        time.sleep(0.05)
    return proc


def _cpu(pids) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


@pytest.mark.parametrize("method", ["cgroup", "signals"])
def test_the_freeze_holds_every_process_of_the_program(method):
    assert become_subreaper()
    freezer = Freezer.create(method)
    if method == "cgroup" and freezer.cgroup is None:
        pytest.skip("this system offers dawnpipe no cgroup freezer (not root, no delegated cgroup)")
    proc = _family(freezer)
    try:
        frozen = freezer.freeze()
        pids = set(freezer.tree())
        assert len(pids) >= 3 and frozen.pids == pids
        before = _cpu(pids)
        time.sleep(0.5)
        assert _cpu(pids) - before < 0.05  # nothing of it ran, the setsid child and the orphan included
        assert freezer.check(frozen) is None
        freezer.thaw()
        time.sleep(0.5)
        assert _cpu(pids) - before > 0.1  # running again
        assert freezer.cpu_seconds() > 0
    finally:
        freezer.kill_all()
        proc.wait(timeout=30)
    assert not freezer.tree()


class _Naps:
    """The time module, with its sleeps recorded instead of slept."""

    def __init__(self):
        self.naps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_second_kill_finds_the_cgroup_gone_and_waits_for_nothing(monkeypatch):
    """The end of a run kills the program twice (when it ends, and when its harness
    closes): the second finds its cgroup removed and returns at once, instead of
    retrying the removal for a second."""
    from dawnpipe.programs import freezer as freezer_module

    freezer = Freezer.create("cgroup")
    if freezer.cgroup is None:
        pytest.skip("this system offers dawnpipe no cgroup freezer (not root, no delegated cgroup)")
    freezer.kill_all()
    assert not freezer.cgroup.exists()
    clock_of_the_freezer = _Naps()
    monkeypatch.setattr(freezer_module, "time", clock_of_the_freezer)
    freezer.kill_all()
    assert clock_of_the_freezer.naps == []


def test_a_stop_waiting_for_a_process_in_the_kernel_is_read_from_its_status():
    """A vfork parent cannot stop until its child execs: its pending SIGSTOP (bit 19, mask 0x40000) says it will."""
    from dawnpipe.programs.freezer import stop_pending_in

    assert stop_pending_in("State:\tD (disk sleep)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000040000\n")
    assert stop_pending_in("SigPnd:\t0000000000040000\nShdPnd:\t0000000000000000\n")
    assert not stop_pending_in("SigPnd:\t0000000000000100\nShdPnd:\t0000000000000002\n")  # SIGUSR1, SIGINT: no stop


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can move a process out of a cgroup")
def test_a_process_that_leaves_the_frozen_cgroup_is_a_violation():
    become_subreaper()
    freezer = Freezer.create("cgroup")
    if freezer.cgroup is None:
        pytest.skip("this system offers dawnpipe no cgroup freezer")
    leave = f"import os, time\nopen({str(freezer.cgroup.parent / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\nprint('out', flush=True)\n" + SPIN
    proc = subprocess.Popen([*freezer.launch_prefix(), sys.executable, "-c", leave], stdout=subprocess.PIPE, start_new_session=True)
    freezer.started(proc.pid)
    try:
        assert proc.stdout.readline().strip() == b"out"
        frozen = freezer.freeze()
        time.sleep(0.3)
        violation = freezer.check(frozen)
        assert violation is not None and "outside the frozen set" in violation and f"pid {proc.pid}" in violation
    finally:
        freezer.thaw()
        freezer.kill_all()
        proc.wait(timeout=30)


def test_work_while_frozen_is_a_violation():
    """A process of the program that keeps running through a freeze (here: one never stopped, as if it had
    escaped) uses CPU time while the program is frozen: check() names it."""
    become_subreaper()
    freezer = Freezer("signals")
    proc = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
    freezer.started(proc.pid)
    try:
        time.sleep(0.3)
        frozen = freezer.freeze()
        os.kill(proc.pid, signal.SIGCONT)  # it runs on behind the freeze's back
        time.sleep(0.5)
        violation = freezer.check(frozen)
        assert violation is not None and ("CPU time while frozen" in violation or "outside the frozen set" in violation)
    finally:
        freezer.kill_all()
        proc.wait(timeout=30)


class FakeNvml:
    """A fake NVML (no GPU here): one device whose per-process samples are given."""

    class Sample:
        def __init__(self, pid, ts, sm):
            self.pid, self.timeStamp, self.smUtil, self.memUtil = pid, ts, sm, 0

    def __init__(self, samples):
        self.samples = samples

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):
        return [s for s in self.samples if s.timeStamp >= since_us]


def test_gpu_work_while_frozen_is_a_violation_with_a_fake_nvml():
    now = time.time()
    watch = DeviceWatch(FakeNvml([FakeNvml.Sample(4242, int((now + 0.1) * 1e6), 37), FakeNvml.Sample(99, int((now + 0.1) * 1e6), 80)]))
    assert watch.active
    busy = watch.busy_since(now, {4242})
    assert busy is not None and "process 4242" in busy and "37% SM" in busy
    assert watch.busy_since(now, {1234}) is None  # somebody else's work on the GPU is not the program's
    assert DeviceWatch(FakeNvml([FakeNvml.Sample(4242, int((now - 5) * 1e6), 50)])).busy_since(now, {4242}) is None
