"""The busy-machine warning: said once, when a run samples far slower than its own best or the load is high."""

from mirl.trainer.pace import PaceWatch


def rate(tokens_per_s):
    return {"perf/rollout_tokens_per_s": tokens_per_s}


def test_far_slower_than_the_best_earlier_iteration_is_said_once():
    watch = PaceWatch(load=lambda: 5.2, cores=2)  # load 5.2 > 1.5 x 2: busy from the start too
    watch.best = (40.0, 1)  # as if iteration 1 had been quiet
    assert watch.check(2, rate(30.0)) is None  # 30 x 2.5 = 75 >= 40: not far slower
    message = watch.check(3, rate(12.0))  # 12 x 2.5 = 30 < 40
    assert message == (
        "iteration 3 sampled 12 tokens/s, 3.3x below the 40 tokens/s of iteration 1 (load average 5.2 on 2 cores): "
        "the machine is busier than when the estimate was made, so the time left is longer than shown"
    )
    assert watch.check(4, rate(5.0)) is None  # once


def test_a_busy_machine_is_named_after_the_first_iteration():
    quiet = PaceWatch(load=lambda: 1.9, cores=2)
    assert quiet.check(1, rate(40.0)) is None and quiet.best == (40.0, 1)
    busy = PaceWatch(load=lambda: 6.0, cores=2)
    assert busy.check(1, rate(14.0)).startswith("the machine is busy (load average 6.0 on 2 cores): iteration 1")


def test_nothing_to_say_without_a_rate_or_a_load():
    watch = PaceWatch(load=lambda: None, cores=2)
    assert watch.check(1, {}) is None and watch.check(1, rate(0.0)) is None
    assert watch.check(2, rate(40.0)) is None  # unknown load: no first-iteration claim
    assert watch.check(3, rate(10.0)).endswith("so the time left is longer than shown")


def test_the_loop_prints_the_warning_and_keeps_it_in_summary_json(tmp_path, capsys):
    import json

    from mirl.trainer.loop import say_warnings
    from mirl.trainer.rundir import RunSummary

    class Printer:
        def print(self, message):
            print(message)

    summary = RunSummary(tmp_path, name="r", model="m", device="cpu", iterations_done=0, iterations_planned=3)
    watch = PaceWatch(load=lambda: 0.5, cores=2)
    for iteration, tokens_per_s in ((1, 40.0), (2, 10.0), (3, 5.0)):
        say_warnings((watch,), iteration, rate(tokens_per_s), Printer(), summary)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"warning: {watch_message}" for watch_message in json.loads(summary.path.read_text())["warnings"]
    ]
    assert len(printed) == 1 and printed[0].startswith("warning: iteration 2 sampled 10 tokens/s, 4.0x below")
    reopened = RunSummary(tmp_path, name="r", model="m", device="cpu", iterations_done=3, iterations_planned=6)
    assert reopened.data["warnings"] == json.loads(summary.path.read_text())["warnings"]  # kept on resume


def test_a_warning_said_before_a_resume_is_not_said_again(tmp_path):
    """summary.json keeps which watch warned; the resumed process's fresh watch stays quiet."""
    from mirl.trainer.loop import say_warnings

    class Printed:
        def __init__(self):
            self.lines = []

        def print(self, text):
            self.lines.append(text)

    class Summary:
        def __init__(self, data):
            self.data = data

        def update(self, **fields):
            self.data.update(fields)

    summary, sinks = Summary({"warnings": []}), Printed()
    say_warnings([PaceWatch(load=lambda: 6.0, cores=2)], 1, rate(14.0), sinks, summary)
    assert len(sinks.lines) == 1 and summary.data["warned_by"] == ["PaceWatch"]
    resumed = Printed()  # a new process: a new watch, the summary read back from the run directory
    say_warnings([PaceWatch(load=lambda: 6.0, cores=2)], 7, rate(14.0), resumed, Summary(dict(summary.data)))
    assert resumed.lines == []
