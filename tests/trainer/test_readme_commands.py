"""Every `mirl ...` command in the README's "Using it" block runs here, through the real entry point.

A run needs a model, so the commands that train, evaluate or diagnose get the tiny test model and a small batch
put in front of the README's own overrides (which come last and so still decide what they set); `runs/NAME`
becomes a run this test trains. `mirl sweep` runs with `--dry-run` (the full sweep is hours of SmolLM2 runs; its
runner is tested in tests/experiments), `mirl analyze` reads a sweep directory made like `mirl sweep` writes one,
and `mirl serve-env` needs the `serve` extra, so tests/remote/test_cli.py runs it. A command added to the README
without a case here fails the first test.
"""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from mirl.cli import main

ROOT = Path(__file__).resolve().parents[2]
SERVED_ELSEWHERE = ("serve-env",)  # tests/remote/test_cli.py::test_the_readme_serve_command_serves


def readme_commands() -> list[list[str]]:
    """The `mirl ...` lines of the README's bash blocks, comments cut, as argument lists (without `mirl`)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("mirl ")]


def tiny(model_dir: Path, out: Path, name: str) -> list[str]:
    return [
        f"model.name={model_dir}",
        "trainer.iterations=1",
        "rollout.prompts_per_iteration=2",
        "rollout.group_size=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=8",
        "diagnostics.num_pairs=6",
        "validation.every=-1",
        "logging.progress=false",
        "logging.tensorboard=false",
        f"trainer.output_dir={out}",
        f"trainer.name={name}",
    ]


@pytest.fixture(scope="module")
def commands():
    return readme_commands()


def test_the_readme_holds_the_commands_this_file_runs(commands):
    assert [c[0] for c in commands] == [
        "envs", "play", "serve-env", "train", "train", "train", "train", "eval", "diagnose", "report", "compare",
        "sweep", "analyze",
    ]  # fmt: skip


def test_every_readme_command_runs(commands, tmp_path, model_dir, monkeypatch, capsys):
    from ..experiments.test_analyses import make_sweep

    monkeypatch.chdir(tmp_path)  # whatever a command writes into the working directory stays in tmp_path
    runs, names = tmp_path / "runs", iter(f"r{i}" for i in range(100))
    made: list[Path] = []
    for command in commands:
        verb, args = command[0], command[1:]
        if verb in SERVED_ELSEWHERE:
            continue
        if verb == "play":
            monkeypatch.setattr("sys.stdin", io.StringIO("quit\n"))
        elif verb == "train" and args and args[0].endswith(".yaml"):
            name = next(names)
            args = [str(ROOT / args[0]), *tiny(model_dir, runs, name), *args[1:]]
            made.append(runs / name)
        elif verb == "train" and args[:1] == ["--resume"]:
            args = ["--resume", str(made[0]), "trainer.iterations=2"]
        elif verb in ("eval", "report", "diagnose", "compare"):
            named = {"runs/NAME": made[0], "runs/A": made[0], "runs/B": made[1]}
            args = [str(named.get(a, a)) for a in args]
            args += ["validation.num_instances=2"] if verb == "eval" else []
            if verb == "compare":
                monkeypatch.chdir(tmp_path)  # compare writes ./compare.html: never into the checkout
        elif verb == "sweep":
            args = [str(ROOT / args[0]), *args[1:], "--dry-run"]
        elif verb == "analyze":
            lines = [{"rollout/success": 0.5, "val/success": 0.5}]
            cells = [(f"s{i}", {"filter.strategy": "none"}, i, {}, lines) for i in (1, 2)]
            sweep = make_sweep(tmp_path / "sweep", cells)
            args = [str(sweep), *args[1:], "--output", str(tmp_path / "analysis")]
        code = main([verb, *args])
        assert code == 0, (command, capsys.readouterr().err[-2000:])
    assert (made[0] / "report.html").is_file() and len(made) == 2
