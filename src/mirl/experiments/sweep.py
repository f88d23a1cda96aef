"""``run_sweep``: plan a spec's runs, check every config, then execute them with one progress display.

See :mod:`mirl.experiments.runner` for the sweep directory layout and the restart semantics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from mirl.experiments import runner
from mirl.experiments.runner import DONE, FAILED, PENDING, RunJob
from mirl.experiments.spec import PlannedRun, SpecError, SweepSpec

LAUNCHERS = ("local", "ray")


@dataclass
class SweepResult:
    statuses: dict[str, dict] = field(default_factory=dict)  # run name -> {"state": ..., ...}

    @property
    def failed(self) -> list[str]:
        return sorted(name for name, s in self.statuses.items() if s["state"] == FAILED)


def check_runs(spec: SweepSpec, planned: list[PlannedRun]) -> dict[str, int]:
    """Load every run's config (a bad key fails here, before any run starts); iterations planned per run."""
    from mirl.config import ConfigError
    from mirl.config_files import load_config

    iterations = {}
    for plan in planned:
        try:
            config = load_config(spec.base, list(plan.overrides))
        except ConfigError as err:
            raise SpecError(f"sweep {spec.name!r} run {plan.name!r}: {err}") from None
        iterations[plan.name] = config.trainer.iterations
    return iterations


def run_sweep(
    spec: SweepSpec,
    *,
    jobs: int = 1,
    launcher: str = "local",
    ray_address: str = "auto",
    console: Console | None = None,
) -> SweepResult:
    """Run every unfinished run of ``spec``, ``jobs`` at a time; returns each run's final state."""
    if jobs < 1:
        raise SpecError(f"--jobs must be >= 1, got {jobs}")
    if launcher not in LAUNCHERS:
        raise SpecError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    console = console or Console()
    planned = spec.runs()
    iterations = check_runs(spec, planned)
    runner.write_manifest(spec, planned)
    todo, finished = runner.plan_jobs(spec, planned, iterations)
    result = SweepResult({p.name: {"state": DONE} for p in planned})
    for job in todo:
        result.statuses[job.plan.name] = {"state": PENDING}
    runner.write_status(spec, result.statuses)
    console.print(
        f"sweep {spec.name}: {len(planned)} runs, {finished} finished, {sum(j.resume for j in todo)} to resume, "
        f"{sum(not j.resume for j in todo)} to start; {jobs} at a time, {runner.threads_per_job(jobs)} threads each"
    )
    execute = _execute_ray if launcher == "ray" else _execute_local
    execute(spec, todo, jobs, result, console, ray_address=ray_address)
    for name in result.failed:
        status = result.statuses[name]
        console.print(f"[red]run {name} failed[/] (exit code {status['exit_code']}); log: {status['log']}")
    console.print(f"sweep directory: {spec.sweep_dir}")
    return result


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


class _Display:
    """One overall bar (iterations of all unfinished runs) plus a bar per running run."""

    def __init__(self, progress: Progress, todo: list[RunJob]) -> None:
        self.progress, self.todo = progress, todo
        self.overall = progress.add_task("sweep", total=sum(j.iterations for j in todo), completed=self._done())
        self.tasks: dict[str, int] = {}

    def _done(self) -> int:
        return sum(min(runner.iterations_done(j.run_dir), j.iterations) for j in self.todo)

    def started(self, job: RunJob) -> None:
        done = runner.iterations_done(job.run_dir)
        self.tasks[job.plan.name] = self.progress.add_task(f"  {job.plan.name}", total=job.iterations, completed=done)

    def refresh(self) -> None:
        for name, task in self.tasks.items():
            job = next(j for j in self.todo if j.plan.name == name)
            self.progress.update(task, completed=runner.iterations_done(job.run_dir))
        self.progress.update(self.overall, completed=self._done())

    def ended(self, job: RunJob) -> None:
        self.progress.remove_task(self.tasks.pop(job.plan.name))


def _record(result: SweepResult, job: RunJob, exit_code: int, console: Console) -> None:
    if exit_code == 0:
        result.statuses[job.plan.name] = {"state": DONE}
        console.print(f"run {job.plan.name} finished")
    else:
        result.statuses[job.plan.name] = {"state": FAILED, "exit_code": exit_code, "log": str(job.log)}


def _execute_local(spec, todo: list[RunJob], jobs: int, result: SweepResult, console: Console, **_) -> None:
    threads = runner.threads_per_job(jobs)
    queue, running = list(todo), []
    with _progress(console) as progress:
        display = _Display(progress, todo)
        try:
            while queue or running:
                while queue and len(running) < jobs:
                    job = queue.pop(0)
                    runner.start_local(spec, job, threads)
                    running.append(job)
                    display.started(job)
                time.sleep(runner.POLL_SECONDS)
                for job in [j for j in running if j.process.poll() is not None]:
                    running.remove(job)
                    display.ended(job)
                    _record(result, job, job.process.returncode, console)
                    runner.write_status(spec, result.statuses)
                display.refresh()
        except KeyboardInterrupt:
            runner.stop_local(running)
            raise


def _execute_ray(spec, todo: list[RunJob], jobs: int, result: SweepResult, console: Console, *, ray_address: str):
    try:
        import ray
    except ImportError:
        raise SpecError("--launcher ray needs Ray; install with: pip install 'mirl[ray]'") from None
    threads = runner.threads_per_job(jobs)
    if ray_address == "local":  # a Ray instance on this machine only, stopped with the sweep
        ray.init(num_cpus=jobs * threads, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=ray_address, ignore_reinit_error=True, log_to_driver=False)
    task = ray.remote(num_cpus=threads)(_run_logged)
    env = runner.child_environment(threads)
    pending = {}
    with _progress(console) as progress:
        display = _Display(progress, todo)
        for job in todo:
            command = runner.train_command(spec, job.plan, spec.sweep_dir / "runs", job.resume)
            job.handle = task.remote(command, env, str(job.log))
            pending[job.handle] = job
            display.started(job)
        while pending:
            ready, _ = ray.wait(list(pending), timeout=runner.POLL_SECONDS)
            for ref in ready:
                job = pending.pop(ref)
                display.ended(job)
                _record(result, job, int(ray.get(ref)), console)
                runner.write_status(spec, result.statuses)
            display.refresh()


def _run_logged(command: list[str], env: dict[str, str], log_path: str) -> int:
    """A Ray task: run one ``mirl train`` process, its output appended to the run's log; its exit code."""
    import subprocess
    from pathlib import Path

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        return subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        ).returncode
