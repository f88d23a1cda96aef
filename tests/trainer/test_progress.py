"""Progress of the long steps inside an iteration: the rollout, the scoring of the diagnostics and validation each
draw a bar under the training bar whose total is known before the first piece of work, and which ends at that
total."""

import dataclasses
import io

import pytest
from rich.console import Console

from mirl.config import ConfigError
from mirl.trainer import train
from mirl.trainer.sinks import Sinks
from mirl.trainer.validation import validate


def _assert_bar(calls):
    """First call ``(0, total)`` with the total already known; done never falls; the last call is ``(total, total)``."""
    total = calls[0][1]
    assert calls[0] == (0, total) and total > 0
    assert all(t == total for _, t in calls), calls
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == total, calls


def test_validation_counts_episode_turns_up_front(formatted_policy, run_config):
    config = run_config("val", "validation.num_instances=2", "rollout.max_turns=3")
    episodes = 2 * config.validation.group_size
    calls = []
    metrics = validate(formatted_policy, config, progress=lambda done, total: calls.append((done, total)))
    _assert_bar(calls)
    assert calls[0] == (0, episodes * 3) and 0.0 <= metrics["val/success"] <= 1.0
    assert validate(formatted_policy, config) == metrics  # the callback changes no number


def test_training_draws_rollout_scoring_and_validation_bars(formatted_policy, run_config, monkeypatch):
    bars = []
    work = Sinks.work

    def recording_work(self, label, unit):
        calls = []
        bars.append((label, unit, calls))
        context = work(self, label, unit)

        class Recorder:
            def __enter__(self):
                update = context.__enter__()
                assert update is not None  # progress is on in this run

                def record(done, total):
                    calls.append((done, total))
                    update(done, total)

                return record

            def __exit__(self, *exc):
                return context.__exit__(*exc)

        return Recorder()

    monkeypatch.setattr(Sinks, "work", recording_work)
    config = run_config(
        "bars",
        "envs=[{name: frozenlake}]",  # prompts that differ, so the diagnostics have something to score
        "trainer.iterations=1",
        "logging.progress=true",
        "diagnostics.num_pairs=6",
        "validation.every=1",
        "validation.num_instances=2",
    )
    console = Console(file=io.StringIO(), width=100)
    train(config, policy=formatted_policy, console=console)
    expected = [("rollout", "episode turns"), ("scoring", "tokens"), ("validation", "episode turns")]
    assert [(label, unit) for label, unit, _ in bars] == expected
    for _, _, calls in bars:
        _assert_bar(calls)
    # not a terminal: plain lines, each stage's first and last, and one per iteration (mirl.plain_progress)
    lines = console.file.getvalue().splitlines()
    for label, unit, calls in bars:
        total = calls[0][1]
        assert any(f"] {label}  0/{total} {unit}  elapsed 0:" in line for line in lines), lines
        assert any(f"] {label}  {total}/{total} {unit}  elapsed " in line for line in lines), lines
    assert any("] train  1/1  elapsed " in line and "success " in line for line in lines), lines


def test_a_warning_printed_into_a_redirected_log_stays_one_line(tmp_path, run_config):
    """Redirected, the console is 80 columns wide: the busy-machine warning came out broken across two lines."""
    from mirl.trainer.pace import PaceWatch

    log = io.StringIO()
    sinks = Sinks(
        tmp_path, run_config("log", "logging.progress=true").logging, total=3, start=0, console=Console(file=log)
    )
    message = PaceWatch(load=lambda: 5.7, cores=2).check(1, {"perf/rollout_tokens_per_s": 15.0})
    sinks.print(f"warning: {message} [load]")
    sinks.close()
    assert f"warning: {message} [load]\n" in log.getvalue() and len(message) > 80


def test_work_bar_is_removed_and_off_without_progress(tmp_path, run_config):
    config = run_config("off", "logging.progress=true")
    sinks = Sinks(tmp_path, config.logging, total=3, start=0, console=Console(file=io.StringIO()))
    with sinks.work("scoring", "tokens") as update:
        update(0, 10)
        update(10, 10)
        assert len(sinks.progress.tasks) == 2
    assert len(sinks.progress.tasks) == 1  # only the training bar is left
    sinks.close()
    quiet = Sinks(tmp_path, run_config("quiet").logging, total=3, start=0)
    with quiet.work("scoring", "tokens") as update:
        assert update is None
    quiet.close()


def test_rollout_counts_episode_turns_across_refill_rounds(formatted_policy, run_config):
    """With dynamic sampling every refill round adds P x K x ``max_turns`` to the total; done never falls."""
    from mirl.trainer.stages import collect

    config = run_config(
        "refill",
        "rollout.max_turns=2",
        "algorithm.dynamic_sampling=true",
        "algorithm.dynamic_sampling_max_rounds=2",
    )
    calls = []
    episodes, rounds = collect(formatted_policy, config, 1, 11, progress=lambda d, t: calls.append((d, t)))
    assert rounds >= 1, "the tiny policy leaves a zero-spread group, so at least one refill round runs"
    per_round = config.rollout.prompts_per_iteration * config.rollout.group_size * 2
    assert calls[0] == (0, per_round) and calls[-1] == (per_round * (rounds + 1), per_round * (rounds + 1))
    done = [d for d, _ in calls]
    assert done == sorted(done) and all(d <= t for d, t in calls)
    assert collect(formatted_policy, config, 1, 11) == (episodes, rounds)  # the callback changes no episode


def test_train_checks_a_config_built_in_python(tmp_path, formatted_policy, run_config):
    """``train`` applies load_config's checks to a Config changed in Python, before anything is written."""
    config = run_config("python")
    for changes, message in (
        ({"trainer": dataclasses.replace(config.trainer, name="../../escaped")}, "trainer.name must be one path"),
        ({"algorithm": dataclasses.replace(config.algorithm, actor_lr=float("inf"))}, "algorithm.actor_lr must be"),
    ):
        with pytest.raises(ConfigError, match=message):
            train(dataclasses.replace(config, **changes), policy=formatted_policy)
    assert not (tmp_path / "python").exists() and not (tmp_path.parent.parent / "escaped").exists()


def test_plain_lines_come_at_most_every_interval():
    from mirl.plain_progress import PlainProgress

    console = Console(file=io.StringIO(), width=60)  # narrower than a line: lines are not wrapped
    progress = PlainProgress(console, interval_s=3600)
    task = progress.add_task("rollout", total=None, unit="turns")
    for done in [*range(11), 10]:  # the last update twice, as a rollout's last turn and its end both report it
        progress.update(task, completed=done, total=10)
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 2  # the first (0/10) and the last (10/10); the rest fall inside the interval
    assert lines[0].endswith("] rollout  0/10 turns  elapsed 0:00") and "] rollout  10/10 turns  elapsed" in lines[1]
    every = PlainProgress(console, interval_s=0)
    task = every.add_task("scoring", total=4)
    for done in range(5):
        every.update(task, completed=done)
    assert len(console.file.getvalue().splitlines()) == 2 + 5


def test_a_timer_repeats_the_newest_line_between_updates():
    """A rollout turn may take minutes with no update: the line of the newest task comes again every interval."""
    import time

    from mirl.plain_progress import PlainProgress

    console = Console(file=io.StringIO(), width=200)
    with PlainProgress(console, interval_s=0.05) as progress:
        progress.add_task("train", total=2)
        task = progress.add_task("rollout", total=None, unit="turns")
        progress.update(task, completed=0, total=2)
        time.sleep(0.5)
    lines = console.file.getvalue().splitlines()
    assert len(lines) >= 3 and all("] rollout  0/2 turns  elapsed 0:0" in line for line in lines), lines
    count = len(lines)
    time.sleep(0.2)
    assert len(console.file.getvalue().splitlines()) == count  # stopped with the block


def test_a_repeated_train_line_names_the_iteration_under_way_and_counts_down():
    """Between two iterations the timer repeats the train line: it must say which iteration runs and give a
    shrinking estimate, not the finished iteration's count with an estimate that grows with the wait."""
    from mirl.plain_progress import PlainProgress

    console = Console(file=io.StringIO(), width=200)
    progress = PlainProgress(console, interval_s=3600)
    task_id = progress.add_task("train", total=4, completed=0, headline="")
    task = progress.tasks[0]
    task.started = 100.0
    task.rate.observe(100.0, 0)
    task.rate.observe(160.0, 1)  # iteration 1 took 60 s
    task.completed = 1
    task.fields["headline"] = "success 0.25"
    # 30 s into iteration 2: 60 s a step x 3 steps left - 30 s = 150 s
    line = PlainProgress.line(task, 190.0)
    assert line.endswith("train  1/4 done, 2 under way  elapsed 1:30  eta 2:30  last: success 0.25")
    # 60 s later: 90 s left, not more
    assert "eta 1:30" in PlainProgress.line(task, 250.0)
    assert "eta" not in PlainProgress.line(task, 400.0)  # overdue: no estimate rather than a wrong one
    progress.remove_task(task_id)


def test_the_progress_line_shows_the_agnostic_share_and_the_alarm_once_it_fires(tmp_path, run_config):
    config = run_config("alarm", "logging.progress=true")
    sinks = Sinks(tmp_path, config.logging, total=3, start=0, console=Console(file=io.StringIO()))
    sinks.log(1, {"diag/trajectory/est/agnostic_share": 0.25, "diag/trajectory/alarm": 0.0})
    assert "agnostic 0.25" in sinks.progress.tasks[0].fields["headline"]
    assert "ALARM" not in sinks.progress.tasks[0].fields["headline"]
    sinks.log(2, {"diag/trajectory/est/agnostic_share": 0.9, "diag/trajectory/alarm": 1.0})
    assert sinks.progress.tasks[0].fields["headline"].endswith("ALARM agnostic share rising (trajectory)")
    sinks.close()


def test_the_estimate_follows_the_recent_rate_when_the_machine_gets_busy():
    """Scoring at 100 tokens/s for 100 s, then at 10 tokens/s (the machine got busy): three minutes later the
    estimate is within a factor 1.5 of the time really left, where the mean rate since the start is 2.5x short."""
    from mirl.plain_progress import Throughput

    rate, total = Throughput(), 20_000
    updates = [(t, 100 * t) for t in range(0, 101, 10)] + [(100 + t, 10_000 + 10 * t) for t in range(10, 181, 10)]
    for now, done in updates:
        rate.observe(float(now), done)
    now, done = updates[-1]  # 280 s, 11,800 done: 8,200 left at 10 per second = 820 s
    mean = now / done * (total - done)  # 194.6 s
    assert 820 / 1.5 < rate.seconds_left(total, float(now)) < 820 * 1.5
    assert mean < 820 / 4
