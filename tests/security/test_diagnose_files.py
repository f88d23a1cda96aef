"""``mirl diagnose`` on hostile files and patterns: every run ends with exit 2 and one line, within the memory and
time the docs state (docs/diagnose.md, "Limits"). Memory is measured, not assumed: the command runs in a child
process under an address-space cap (``RLIMIT_AS``), the way a container or strict overcommit limits it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirl.cli import main

GIB = 1 << 30
# Run the CLI (or a reader) under an address-space cap; print the peak resident set (VmHWM) last on stdout. The
# process ends through sys.exit like the installed `mirl` script, so an abort at interpreter exit shows as 134.
CAPPED = """
import resource, sys
cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
import mirl.diagnostics.records as records
for pair in filter(None, sys.argv[2].split(",")):
    name, value = pair.split("=")
    setattr(records, name, int(value))
from mirl.cli import main
code = main(sys.argv[3:])
peak = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0]
print("peak_kib", peak, flush=True)
sys.exit(code)
"""


def run_capped(cap: int, *args, limits: str = "", timeout: float = 300) -> tuple[int, str, float, float]:
    """``(exit code, stderr, peak MiB or nan, seconds)`` of ``mirl ARGS`` in a child under ``cap`` bytes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CAPPED, str(cap), limits, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    seconds = time.perf_counter() - start
    peaks = [int(line.split()[1]) / 1024 for line in done.stdout.splitlines() if line.startswith("peak_kib")]
    return done.returncode, done.stderr, peaks[0] if peaks else float("nan"), seconds


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


# ------------------------------------------------------------------------------------------------ patterns


def test_a_pattern_whose_counted_repeats_multiply_is_refused_before_it_compiles(tmp_path):
    """21 characters that made the regex compiler take 22 GB: refused by their cost, under a 3 GiB cap."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n")
    code, err, peak, seconds = run_capped(3 * GIB, "diagnose", path, "--reasoning-regex", "((?:a{65535}){65535})")
    assert code == 2 and seconds < 60
    assert "repeat" in one_line(err) and "4294836225" in err


@pytest.mark.parametrize(
    "pattern",
    [
        "(?:(?:(?:a{100}){100}){100})(x)",  # nested: 10**6
        "(" + "a{60000}" * 2 + ")",  # a sum of 120,000 units
        "((?:ab|cd){50000})",  # 4 units each, 200,000
        "(?:[)]a{1000}){1000}(x)",  # a bracket inside a class is no group
        "(?x)(?:a # )\n{1000}){1000}(x)",  # nor one inside a verbose comment
    ],
)
def test_costly_patterns_are_refused_and_cheap_ones_kept(pattern):
    from mirl.diagnostics.reasoning import ReasoningRegex
    from mirl.errors import UserError

    with pytest.raises(UserError, match="counted repeats"):
        ReasoningRegex.compile(pattern)
    for cheap in ("<reasoning>(.*?)</reasoning>", "(a{65535})", r"<r>([^<]{0,20000}?)</r>", r"\p{L}{3}(x)"):
        ReasoningRegex.compile(cheap)


def test_replies_of_unclosed_tags_are_skipped_within_their_share_and_named(tmp_path, monkeypatch, capsys):
    """With the pattern the docs recommend, a reply of 95,000 unclosed tags cost about 2 s and stopped the whole
    diagnosis blaming the pattern; now each reply has a share of the time, and the skipped ones are counted and
    named while the others keep their Z (shorter replies and shares here, so the test stays fast)."""
    from mirl.cli import diagnose as diagnose_cli
    from mirl.diagnostics import reasoning
    from mirl.policy.tiny import tiny_policy

    monkeypatch.setattr(diagnose_cli, "load_policy", lambda model, **options: tiny_policy(seed=5))
    monkeypatch.setattr(reasoning, "SEARCH_PACE", 64 << 20)  # shares of 10 ms: 30,000 tags cost ~0.2 s each
    hostile = "<reasoning>" * 30_000
    records = [
        {"prompt": f"Grid {g}\n", "completion": hostile if g in "BDE" else f"<reasoning>go {g}</reasoning> Up"}
        for g in "ABCDEF"
    ]
    path = tmp_path / "pc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.json"
    start = time.perf_counter()
    code = main(["diagnose", str(path), "--reasoning-regex", "<reasoning>(.*?)</reasoning>", "--out", str(out)])
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 0, err
    assert "3 replies" in err and f"({path}:2, {path}:4, {path}:5)" in err
    assert json.loads(out.read_text())["metrics"]["diag/first_turn/pairs"] == 3.0
    assert seconds < 60


def test_the_regex_time_of_a_file_is_bounded_in_total(monkeypatch):
    """Twenty replies that each cost about 2 s unbounded: together they stop at the file's total (here 1 s)."""
    from mirl.diagnostics import reasoning
    from mirl.diagnostics.reasoning import ReasoningRegex

    monkeypatch.setattr(reasoning, "SEARCH_TOTAL_S", 1.0)
    rule = ReasoningRegex.compile("<reasoning>(.*?)</reasoning>")
    start = time.perf_counter()
    for n in range(20):
        rule.budget.at = f"record {n + 1}"
        assert rule.span("<reasoning>" * 95_000) is None
    assert time.perf_counter() - start < 3.0  # the total plus the timeout check's granularity
    assert len(rule.budget.skipped) == 20 and rule.budget.skipped[0] == "record 1" and rule.budget.left == 0


# ------------------------------------------------------------------------------------------------ file reads


def test_a_sixty_byte_file_is_read_under_a_three_gib_cap(tmp_path):
    """Every read asked for 4 GiB up front; a small file must read where only 3 GiB of address space exist."""
    path = tmp_path / "small.jsonl"
    path.write_text(json.dumps({"input": "What is 2+2?", "output": "4", "step": -1}) + "\n")
    assert path.stat().st_size < 64
    code, err, peak, seconds = run_capped(3 * GIB, "diagnose", path, "--model", tmp_path / "none")
    assert code == 2 and "field 'step' must be a finite number >= 0" in one_line(err)


def test_a_bounded_read_asks_for_chunks_not_for_its_limit(tmp_path):
    """``safeio.read_bytes`` (configs, run files, rollouts beside a run) read ``limit + 1`` bytes in one call."""
    path = tmp_path / "small.json"
    path.write_text('{"a": 1}')
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from mirl.safeio import read_bytes; print(read_bytes(sys.argv[1], 4 << 30))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "b'{\"a\": 1}'"), done.stderr[-2000:]


def test_a_file_of_empty_objects_is_refused_at_its_first_line_in_little_memory(tmp_path):
    """80 MB of `{}` lines peaked at 4.8 GB before the 1M-record refusal: now the lines stream and the first is
    refused as no known format."""
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"{}\n" * 27_000_000)
    code, err, peak, seconds = run_capped(int(1.5 * GIB), "diagnose", path)
    assert code == 2 and "empty.jsonl:1: the first record has neither" in one_line(err), err[-2000:]
    assert "got keys none" in err and peak < 600, peak  # MiB: torch, not the file


def test_the_record_bound_stops_the_stream_where_it_is_reached(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_bytes(b'{"prompt": "p", "completion": "c"}\n' * 120_000)
    code, err, peak, seconds = run_capped(int(1.5 * GIB), "diagnose", path, limits="MAX_RECORDS=100000")
    assert code == 2 and "holds more than 100000 records" in one_line(err), err[-2000:]


@pytest.mark.slow
def test_more_than_a_million_records_stop_at_the_bound_in_little_memory(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_bytes(b'{"prompt": "p", "completion": "c"}\n' * 1_200_000)
    code, err, peak, seconds = run_capped(int(1.5 * GIB), "diagnose", path)
    assert code == 2 and "more than 1000000 records" in one_line(err), err[-2000:]
    assert peak < 1000, peak  # MiB: torch and a million parsed records


def test_records_that_would_fill_memory_are_refused_at_the_stated_bound(tmp_path):
    """Lines of integer lists (8x their bytes in Python): with the record budget at 64 MiB the read stops there,
    where reading the whole 120 MB file would need about 1 GB more than the cap allows."""
    path = tmp_path / "ints.jsonl"
    line = b'{"input": "x", "output": "y", "ids": [' + b"1000," * 300_000 + b"1]}\n"
    path.write_bytes(line * 80)
    code, err, peak, seconds = run_capped(int(1.4 * GIB), "diagnose", path, limits=f"MAX_RECORD_BYTES={64 << 20}")
    assert code == 2 and "67108864 bytes" in one_line(err) and ":5:" in err, err[-2000:]


def test_a_parquet_file_whose_strings_decode_past_the_bound_is_refused(tmp_path):
    """414 KB of zstd parquet: 1M rows of one dictionary-encoded 2,000-character string, 2 GB decoded."""
    pa = pytest.importorskip("pyarrow")
    import numpy as np
    import pyarrow.parquet as pq

    rows = 1_000_000
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["x" * 2000]))
    table = pa.table({"prompt": text, "completion": pa.array(["c"] * rows)})
    path = tmp_path / "bomb.parquet"
    pq.write_table(table, path, compression="zstd")
    assert path.stat().st_size < 2 << 20
    code, err, peak, seconds = run_capped(3 * GIB, "diagnose", path)
    assert code == 2 and "decoded" in one_line(err), err[-2000:]
    assert peak < 1800, peak


def test_a_config_nested_five_thousand_deep_is_one_line(tmp_path):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "config.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    (run / "rollouts" / "iteration_000001.jsonl").write_text('{"turns": 3}\n')
    code, err, peak, seconds = run_capped(3 * GIB, "diagnose", run)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    notes = err.strip().splitlines()
    assert any("nested too deeply" in line for line in notes), err
    assert notes[-1].startswith("mirl diagnose: ") and "field 'schema' is missing" in notes[-1]


@pytest.mark.parametrize("where", ["verl", "trl"])
def test_a_step_that_is_not_finite_is_refused_before_the_model_loads(tmp_path, where, capsys):
    if where == "verl":
        path = tmp_path / "1.jsonl"
        path.write_text('{"input": "q", "output": "a", "score": 1.0, "step": 1e999}\n')
    else:
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path = tmp_path / "completions_00001.parquet"
        pq.write_table(pa.table({"step": [float("inf")], "prompt": ["q"], "completion": ["a"]}), path)
    assert main(["diagnose", str(path), "--model", str(tmp_path / "no-model")]) == 2
    assert "field 'step' must be a finite number >= 0" in one_line(capsys.readouterr().err)


def test_a_parquet_refusal_exits_with_two_every_time(tmp_path):
    """torch 2.13 with pyarrow 26 aborted at interpreter exit (134) in 5 of 6 runs after the one-line refusal."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({"prompt": ["p"] * 10, "completion": [3] * 10}), path)
    codes = [run_capped(16 * GIB, "diagnose", path)[0] for _ in range(5)]
    assert codes == [2] * 5


# ------------------------------------------------------------------------------------------------ links


def _run_with_rollouts(tmp_path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "rollouts" / "iteration_000001.jsonl").write_text('{"turns": 3}\n')
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "iteration_000001.jsonl").write_text('{"secret": "do not read"}\n')
    return run, secret


@pytest.mark.parametrize("swap", ["file", "folder"])
def test_a_rollout_file_swapped_for_a_link_after_it_was_chosen_is_not_read(tmp_path, monkeypatch, capsys, swap):
    """The newest file is chosen without following links; a link swapped in before the read is refused by the
    open itself, whether it replaces the file or the rollouts/ folder."""
    from mirl.cli import diagnose as diagnose_cli

    run, secret = _run_with_rollouts(tmp_path)
    chosen = diagnose_cli.rollout_file

    def choose_then_swap(path):
        found = chosen(path)
        if swap == "file":
            found.unlink()
            found.symlink_to(secret / "iteration_000001.jsonl")
        else:
            (run / "rollouts").rename(run / "old")
            (run / "rollouts").symlink_to(secret)
        return found

    monkeypatch.setattr(diagnose_cli, "rollout_file", choose_then_swap)
    assert main(["diagnose", str(run), "--model", str(tmp_path / "no-model")]) == 2
    err = capsys.readouterr().err
    line = one_line("\n".join(line for line in err.splitlines() if not line.startswith("mirl diagnose: scoring")))
    assert "symbolic link" in line and "secret" not in err
