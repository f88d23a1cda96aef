"""mirl.envs.data: the split hash, local jsonl/parquet and (faked) hub loading, disjoint splits, seed -> row."""

import doctest
import json
import os
import pathlib
import sys
import types

import pytest

import mirl.envs.data as data
from mirl.envs.data import VALIDATION_FRACTION, RowView, load_rows, row_for_seed, split_of
from mirl.envs.math.countdown import instance_key

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
COUNTDOWN = FIXTURES / "countdown_tiny.jsonl"
METAMATH = FIXTURES / "metamath_tiny.jsonl"


def _fixture_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _countdown_rows(source, path, split, **kwargs):
    return load_rows(source, str(path), split, key_fields=("nums", "target"), key=instance_key, **kwargs)


class FakeDataset:
    """The slice of ``datasets.Dataset`` that mirl uses: column names, length, row and column access."""

    def __init__(self, rows):
        self.rows = rows
        self.column_names = list(rows[0])

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        if isinstance(index, str):
            return [row[index] for row in self.rows]
        return dict(self.rows[index])


@pytest.fixture(autouse=True)
def fresh_caches():
    data.clear_caches()
    yield
    data.clear_caches()


@pytest.fixture
def fake_hub(monkeypatch):
    """Install an in-process ``datasets`` module whose ``load_dataset`` serves the Countdown fixture."""
    calls = []

    def load_dataset(path, split=None):
        calls.append((path, split))
        return FakeDataset(_fixture_rows(COUNTDOWN))

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def test_split_of_is_pinned_and_deterministic():
    # pinned values: a change of hash function or threshold would move instances between splits
    assert split_of("2,3,5|10") == "train"
    assert split_of(instance_key([20, 17, 9], 28)) == "validation"  # key "9,17,20|28"
    assert [split_of(f"k{i}") for i in range(50)] == [split_of(f"k{i}") for i in range(50)]


def test_split_fraction_matches_the_constant():
    keys = [f"question {i}" for i in range(20_000)]
    fraction = sum(split_of(k) == "validation" for k in keys) / len(keys)
    # binomial std = sqrt(0.1 * 0.9 / 20000) = 0.00212; 5 std = 0.0106
    assert abs(fraction - VALIDATION_FRACTION) < 0.0106


@pytest.mark.parametrize("split", ["train", "validation"])
def test_local_jsonl_rows_follow_the_key_hash(split):
    rows = _countdown_rows("local", COUNTDOWN, split)
    assert all(split_of(instance_key(r["nums"], r["target"])) == split for r in rows)
    assert len(rows) == {"train": 11, "validation": 2}[split]  # the fixture: 11 train rows, 2 validation rows


def test_local_splits_partition_the_file():
    train = [json.dumps(r, sort_keys=True) for r in _countdown_rows("local", COUNTDOWN, "train")]
    validation = [json.dumps(r, sort_keys=True) for r in _countdown_rows("local", COUNTDOWN, "validation")]
    everything = [json.dumps(r, sort_keys=True) for r in _fixture_rows(COUNTDOWN)]
    assert not set(train) & set(validation)
    assert sorted(train + validation) == sorted(everything)


def test_permuted_duplicates_land_in_the_same_split():
    # rows 0 and 1 of the fixture are [44, 19, 35] and [35, 44, 19] with target 98; rows 11 and 12 likewise
    train = _countdown_rows("local", COUNTDOWN, "train")
    validation = _countdown_rows("local", COUNTDOWN, "validation")
    assert sum(r["target"] == 98 for r in train) == 2
    assert [sorted(r["nums"]) for r in validation] == [[9, 17, 20], [9, 17, 20]]


def test_parquet_gives_the_same_rows_as_jsonl(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed (pip install 'mirl[data]')")
    import pyarrow

    path = tmp_path / "countdown.parquet"
    pq.write_table(pyarrow.Table.from_pylist(_fixture_rows(COUNTDOWN)), path)
    for split in ("train", "validation"):
        assert list(_countdown_rows("local", path, split)) == list(_countdown_rows("local", COUNTDOWN, split))


def test_parquet_without_a_reader_names_the_install(tmp_path, monkeypatch):
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1")
    for name in ("pyarrow", "pyarrow.parquet", "pandas"):
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    with pytest.raises(ImportError, match=r"needs pyarrow .*pip install 'mirl\[data\]'"):
        _countdown_rows("local", path, "train")


@pytest.mark.parametrize(
    ("content", "suffix", "error", "match"),
    [
        ('{"target": 1, "nums": [1]}\nnot json\n', ".jsonl", ValueError, r":2 is not valid JSON"),
        ("[1, 2]\n", ".jsonl", ValueError, r":1 holds a list; expected a JSON object"),
        ('{"target": 1, "nums": [1]}\n', ".csv", ValueError, r"reads .jsonl or .parquet"),
        ('{"target": 1}\n', ".jsonl", ValueError, r"row 0 has no field\(s\) \['nums'\]"),
    ],
)
def test_bad_local_files_fail_loudly(tmp_path, content, suffix, error, match):
    path = tmp_path / f"rows{suffix}"
    path.write_text(content)
    with pytest.raises(error, match=match):
        _countdown_rows("local", path, "train")


def test_missing_file_and_empty_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="expects an existing"):
        _countdown_rows("local", tmp_path / "absent.jsonl", "train")
    one = tmp_path / "one.jsonl"
    one.write_text('{"target": 98, "nums": [44, 19, 35]}\n')  # a train key
    with pytest.raises(ValueError, match="split 'validation' of .* is empty"):
        _countdown_rows("local", one, "validation")


def test_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"target": 98, "nums": [44, 19, 35]}\n')
    assert len(_countdown_rows("local", path, "train")) == 1
    path.write_text('{"target": 98, "nums": [44, 19, 35]}\n{"target": 10, "nums": [2, 5, 1]}\n')
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a visibly later mtime
    assert len(_countdown_rows("local", path, "train")) == 2


def test_hub_rows_are_partitioned_like_local_rows(fake_hub):
    for split in ("train", "validation"):
        assert list(_countdown_rows("hf", "some/dataset", split)) == list(_countdown_rows("local", COUNTDOWN, split))
    assert fake_hub == [("some/dataset", "train")]  # loaded once, cached for the second split


def test_hub_own_split_is_used_whole(fake_hub):
    rows = _countdown_rows("hf", "some/dataset", "validation", hf_split="test")
    assert len(rows) == 13 and fake_hub == [("some/dataset", "test")]


def test_missing_datasets_package_says_how_to_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"needs the `datasets` package.*pip install 'mirl\[data\]'.*source='local'"):
        _countdown_rows("hf", "Jiayi-Pan/Countdown-Tasks-3to4", "train")


def test_offline_hub_says_how_to_fix(monkeypatch):
    def load_dataset(path, split=None):
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(RuntimeError, match=r"could not load dataset .*ConnectionError: no network. Offline\?"):
        _countdown_rows("hf", "Jiayi-Pan/Countdown-Tasks-3to4", "train")


def test_hub_schema_mismatch_names_the_columns(monkeypatch):
    table = FakeDataset([{"question": "q", "answer": "a"}])
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda path, split: table))
    with pytest.raises(ValueError, match=r"has no column\(s\) \['nums', 'target'\]; columns: question, answer"):
        _countdown_rows("hf", "x/y", "train")


def test_bad_source_and_split_are_rejected():
    with pytest.raises(ValueError, match="source must be one of 'local', 'hf', got 'web'"):
        _countdown_rows("web", COUNTDOWN, "train")
    with pytest.raises(ValueError, match="split must be one of 'train', 'validation', got 'test'"):
        _countdown_rows("local", COUNTDOWN, "test")
    with pytest.raises(ValueError, match="hf_split applies to source='hf' only"):
        _countdown_rows("local", COUNTDOWN, "train", hf_split="test")


def test_row_for_seed_is_a_fixed_permutation():
    rows = [{"i": i} for i in range(10)]
    order = [row_for_seed(rows, seed)["i"] for seed in range(10)]
    assert sorted(order) == list(range(10))  # seeds 0..n-1: every row once
    assert order != list(range(10))  # shuffled, so a file sorted by difficulty is not walked in order
    assert [row_for_seed(rows, seed)["i"] for seed in range(10, 20)] == order  # seed n + s -> seed s
    assert [row_for_seed(rows, seed)["i"] for seed in range(10)] == order


def test_row_for_seed_validates_and_copies():
    rows = [{"i": 0}]
    row_for_seed(rows, 0)["i"] = 99
    assert rows == [{"i": 0}]
    for seed in (-1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            row_for_seed(rows, seed)
    with pytest.raises(ValueError, match="at least one row"):
        row_for_seed([], 0)


def test_row_view_reads_through_without_copying_the_table():
    table = [{"a": 1}, {"a": 2}, {"a": 3}]
    view = RowView(table, [2, 0])
    assert len(view) == 2 and list(view) == [{"a": 3}, {"a": 1}]
    view[0]["a"] = 0
    assert table[2] == {"a": 3}


def test_docstring_examples():
    outcome = doctest.testmod(data)
    assert outcome.attempted > 0 and outcome.failed == 0
