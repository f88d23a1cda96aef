"""``mirl.train``: a run from Python that ends as ``mirl train`` ends (docs/your-task.md).

It sits above the layers (DESIGN.md) because it joins two of them: the trainer (:func:`mirl.trainer.tasks.train`
runs the Config or the Tasks) and the report (:func:`mirl.report.ending.finish` builds ``report.html`` and prints
the closing lines and the never-updated warning). Library code that wants neither passes ``report=False,
quiet=True``, or calls :func:`mirl.trainer.train` (a Config) and :func:`mirl.trainer.tasks.train_tasks` (Tasks),
which print no ending.
"""

from __future__ import annotations

from typing import Any


def train(what, /, *, report: bool = True, quiet: bool = False, **kwargs: Any):
    """Train ``what`` (a :class:`~mirl.config.Config`, a :class:`~mirl.envs.task.Task`, or a list of Tasks and env
    names; keywords as :func:`mirl.trainer.tasks.train`), then build ``report.html`` unless ``report=False``, and
    print the closing lines and, for a run that never updated its policy, a warning on stderr, unless ``quiet``.
    Returns the :class:`~mirl.trainer.RunResult`."""
    from mirl.trainer.tasks import train as train_run

    result = train_run(what, **kwargs)
    if quiet:
        if report:
            from mirl.report.build import build_report

            build_report(result.run_dir)
        return result
    from mirl.report.ending import finish

    finish(result, report=report, prog="mirl.train")
    return result
