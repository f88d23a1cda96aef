"""Hostile files and directories: linked run and analysis directories, alias-bomb sweep specs, damaged
checkpoints that must not block a resume, and a metrics log of noise that must not vanish silently."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

from mirl.cli import main
from mirl.experiments import KINDS, read_sweep, write_analysis
from mirl.safeio import RunDirError
from mirl.trainer.checkpoint import CheckpointError, load_latest

from ..experiments.test_analyses import make_sweep


def _victim(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.yaml").write_text("rollout: {group_size: 4}\n")
    for name in ("report.html", "groups.jsonl", "metrics.jsonl"):
        (victim / name).write_text("the victim's own file\n")
    return victim


def _untouched(victim):
    return all((victim / n).read_text() == "the victim's own file\n" for n in ("report.html", "groups.jsonl"))


def test_report_refuses_a_run_directory_that_is_a_link(tmp_path, capsys):
    victim = _victim(tmp_path)
    (tmp_path / "run").symlink_to(victim)
    assert main(["report", str(tmp_path / "run")]) == 2
    assert "is a symbolic link" in capsys.readouterr().err and _untouched(victim)


def test_train_refuses_a_run_directory_that_is_a_link(tmp_path, capsys):
    victim = _victim(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x").symlink_to(victim)
    argv = ["train", "--defaults", f"trainer.output_dir={tmp_path / 'runs'}", "trainer.name=x", "trainer.iterations=1"]
    assert main(argv) == 2
    assert "is a symbolic link" in capsys.readouterr().err and _untouched(victim)
    assert main(["train", "--resume", str(tmp_path / "runs" / "x")]) == 2
    assert "is a symbolic link" in capsys.readouterr().err and _untouched(victim)


def test_an_analysis_directory_that_is_a_link_is_refused(tmp_path):
    runs = [("r1", {"filter.value": "0.5"}, 1, {}, [{"rollout/success": 0.5}])]
    sweep = make_sweep(tmp_path / "sw", runs)
    victim = tmp_path / "victim"
    victim.mkdir()
    (sweep / "analysis").symlink_to(victim)
    with pytest.raises(RunDirError, match="is a symbolic link"):
        write_analysis(sweep, KINDS["table"](read_sweep(sweep)))
    assert list(victim.iterdir()) == []


PEAK = """
import resource, sys
from mirl.cli import main
import mirl.config, mirl.experiments  # imported before the baseline, as the command would
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("exit", main(["sweep", sys.argv[1], "--dry-run"]))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def _alias_bomb(levels: int) -> str:
    """A valid spec whose ``overrides`` mapping nests aliases: level n refers 10 times to level n - 1."""
    lines = ["name: bomb", "overrides:", '  l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_a_sweep_spec_alias_bomb_is_refused_in_little_memory(tmp_path):
    """Under 500 bytes of nested aliases expand to 10^7 values once each run's overrides are read as a config
    (the old reader let them through to ``--dry-run``'s config checks)."""
    spec = tmp_path / "bomb.yaml"
    spec.write_text(_alias_bomb(7))
    assert spec.stat().st_size < 1000
    done = subprocess.run([sys.executable, "-c", PEAK, str(spec)], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[0] == "exit 2", done
    assert "more than 50000 YAML nodes once aliases are expanded" in done.stderr
    assert int(done.stdout.splitlines()[-1]) < 50, "peak RSS grew by more than 50 MB"


def test_a_spec_of_a_hundred_million_runs_is_refused_with_its_count(tmp_path, capsys):
    grid = "\n".join(f"  key{k}.x: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for k in range(8))
    spec = tmp_path / "big.yaml"
    spec.write_text(f"name: big\ngrid:\n{grid}\nseeds: [1]\n")
    assert spec.stat().st_size < 450
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(spec), *extra]) == 2
        assert "expands to 100,000,000 runs" in capsys.readouterr().err


@pytest.fixture
def checkpoints(tmp_path):
    """Two checkpoints whose older one is intact: iteration 1 holds a small real state."""
    directory = tmp_path / "checkpoints"
    for iteration in (1, 2):
        folder = directory / f"iteration_{iteration:06d}"
        folder.mkdir(parents=True)
        torch.save({"iteration": iteration, "policy": {"w": torch.ones(2)}}, folder / "state.pt")
    return directory


@pytest.mark.parametrize("size", [1, 2, 8, 100])
@pytest.mark.parametrize("fill", [b"\0", b"\xff"])
def test_a_tiny_or_zero_filled_newest_checkpoint_falls_back_with_a_warning(checkpoints, capsys, size, fill):
    """The old loader called any weights-only failure a pickle and refused the run directory."""
    (checkpoints / "iteration_000002" / "state.pt").write_bytes(fill * size)
    path, state = load_latest(checkpoints)
    assert path.name == "iteration_000001" and state["iteration"] == 1
    err = capsys.readouterr().err
    assert "iteration_000002/state.pt is damaged" in err and "using iteration_000001" in err


class Payload:
    def __reduce__(self):
        return (os.system, ("true",))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_real_pickle_stream_is_still_refused_by_name(checkpoints, protocol):
    (checkpoints / "iteration_000002" / "state.pt").write_bytes(
        pickle.dumps({"iteration": 2, "policy": Payload()}, protocol=protocol)
    )
    with pytest.raises(CheckpointError, match=r"pickled Python object \((posix|os)\.system\)"):
        load_latest(checkpoints)


def test_a_report_of_a_huge_iteration_number_is_no_traceback(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("rollout: {group_size: 4}\n")
    lines = [{"iteration": 1e300, "rollout/success": 0.5}, {"iteration": 1, "rollout/success": 0.25}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["report", str(run)]) == 0
    assert "Traceback" not in capsys.readouterr().err and (run / "report.html").is_file()


@pytest.mark.parametrize("digits", [400, 5000])
def test_report_and_compare_skip_a_line_with_an_integer_wider_than_any_float(tmp_path, capsys, digits):
    """A 400-digit integer overflowed math.isfinite; a 5,000-digit one made Python's JSON reader refuse the file."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("rollout: {group_size: 4}\n")
    huge = "9" * digits
    lines = [
        '{"iteration": 1, "rollout/success": 0.25}\n',
        '{"iteration": 2, "rollout/success": ' + huge + "}\n",
        '{"iteration": ' + huge + ', "rollout/success": 0.5}\n',
        '{"iteration": 3, "rollout/success": 0.75}\n',
    ]
    (run / "metrics.jsonl").write_text("".join(lines))
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and (run / "report.html").is_file()
    assert f"an integer of {digits} digits" in (run / "report.html").read_text()  # the skipped lines are named
    assert main(["compare", str(run), str(run), "--out", str(tmp_path / "compare.html")]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_analyze_refuses_a_deep_or_oversized_or_wide_sweep_manifest_in_one_line(tmp_path, capsys):
    runs = [("r1", {"filter.value": "0.5"}, 1, {}, [{"rollout/success": 0.5}])]
    sweep = make_sweep(tmp_path / "sw", runs)
    for manifest in ("[" * 200_000 + "]" * 200_000, " " * (17 << 20) + "{}", '{"runs": [], "n": ' + "9" * 5000 + "}"):
        (sweep / "sweep.json").write_text(manifest)
        assert main(["analyze", str(sweep), "--kind", "table"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("mirl analyze: ") and "is malformed" in err and len(err.splitlines()) == 1, err


def test_sweep_and_train_refuse_a_binary_file_in_one_line(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"\x00\x01\xff\xfe not text")
    for command in ("sweep", "train"):
        assert main([command, str(spec)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"mirl {command}: ") and "not valid YAML" in err and "\n" not in err, err


def test_compare_of_a_huge_metrics_file_reads_a_bounded_part(tmp_path):
    """A 450 MB ``metrics.jsonl`` took ``mirl compare`` past 3 GB; now only its first 64 MiB of lines are read."""
    import subprocess
    import sys

    from mirl.report.rundir import MAX_JSONL_BYTES

    runs = []
    line = json.dumps({"iteration": 1, **{f"metric/{i}": 0.5 for i in range(200)}}) + "\n"
    for name in ("a", "b"):
        run = tmp_path / name
        run.mkdir()
        (run / "summary.json").write_text('{"status": "finished"}')
        count = 3 * MAX_JSONL_BYTES // len(line)  # 192 MiB each
        with (run / "metrics.jsonl").open("w") as handle:
            for i in range(count):
                handle.write(line.replace('"iteration": 1', f'"iteration": {i + 1}', 1))
        runs.append(str(run))
    script = (
        "import resource, sys\n"
        "from mirl.cli import main\n"
        "code = main(['compare', *sys.argv[1:]])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, code)\n"
    )
    # in its own folder: compare writes ./compare.html, never into the checkout
    done = subprocess.run(
        [sys.executable, "-c", script, *runs], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    peak_mb, code = map(int, done.stdout.strip().splitlines()[-1].split())
    print(f"compare of two 192 MiB metrics files: peak {peak_mb} MB")
    assert code == 0 and "Traceback" not in done.stderr
    assert peak_mb < 1500, peak_mb  # two runs of 192 MiB each
