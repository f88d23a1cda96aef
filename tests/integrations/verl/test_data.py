"""``mirl verl-data``: the parquet rows veRL's trainer reads; runs without veRL (needs pyarrow)."""

import json

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from mirl.cli import main  # noqa: E402
from mirl.integrations.verl.data import instance_rows  # noqa: E402
from mirl.trainer.specs import train_seed, validation_seed  # noqa: E402


def test_rows_name_the_instance_and_train_and_validation_seeds_are_disjoint():
    train = instance_rows("frozenlake", {"success_rate": 1.0}, 5000, "train")
    val = instance_rows("frozenlake", {"success_rate": 1.0}, 512, "validation")
    # row 4097 is prompt index 1 of "iteration" 1: 2 * ((0 * 1_000_003 + 1) * 4096 + 1) = 8194
    assert train[4097]["env_seed"] == train_seed(0, 1, 1) == 8194
    assert [r["env_seed"] for r in val[:3]] == [validation_seed(j) for j in range(3)] == [1, 3, 5]
    seeds = [r["env_seed"] for r in train]
    assert len(set(seeds)) == 5000 and not set(seeds) & {r["env_seed"] for r in val}
    assert json.loads(train[0]["env_options"]) == {"success_rate": 1.0}
    assert train[0]["agent_name"] == "mirl" and train[0]["data_source"] == "frozenlake"


def test_dataset_backed_envs_get_their_split():
    assert json.loads(instance_rows("metamath", {}, 1, "train")[0]["env_options"])["split"] == "train"
    assert json.loads(instance_rows("metamath", {}, 1, "validation")[0]["env_options"])["split"] == "validation"


def test_cli_writes_both_files(tmp_path, capsys):
    assert main(["verl-data", "sokoban", str(tmp_path / "d"), "--train", "4", "--val", "2"]) == 0
    train = pq.read_table(tmp_path / "d" / "train.parquet").to_pylist()
    val = pq.read_table(tmp_path / "d" / "val.parquet").to_pylist()
    assert [r["env_seed"] for r in train] == [0, 2, 4, 6] and [r["env_seed"] for r in val] == [1, 3]
    assert train[0]["prompt"][0]["role"] == "user" and train[0]["extra_info"] == {"index": 0, "split": "train"}
    assert "4 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope", "--train", "1", "--val", "1"], "unknown environment 'nope'"),
        (["sokoban", "--train", "0", "--val", "1"], "--train must be >= 1"),
        (["sokoban", "--train", "1", "--val", "0"], "--val must be >= 1"),
        (["sokoban", "--train", "1", "--val", "1", "--options", "[1]"], "must be a JSON object"),
        (["sokoban", "--train", "1", "--val", "1", "--options", "{bad"], "Expecting property name"),
    ],
)
def test_cli_user_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main(["verl-data", argv[0], str(tmp_path / "d"), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl verl-data: ") and message in err and err.count("\n") == 1


def test_a_planted_symlink_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    out = tmp_path / "d"
    out.mkdir()
    (out / "train.parquet").symlink_to(target)
    assert main(["verl-data", "bandit", str(out), "--train", "1", "--val", "1"]) == 0
    assert target.read_text() == "keep" and not (out / "train.parquet").is_symlink()
