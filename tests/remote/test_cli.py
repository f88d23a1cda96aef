"""``mirl serve-env`` user errors are one line and exit 2; the served env passes the env contract checker."""

from __future__ import annotations

import pytest

from mirl.cli import main
from mirl.envs import check_env, make

from .helpers import served

pytest.importorskip("openenv", reason="the remote envs need openenv 0.10: pip install 'mirl[serve]'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchenv"], "unknown environment 'nosuchenv'"),
        (["frozenlake", "size=abc"], "option size of environment 'frozenlake' must be an int"),
        (["frozenlake", "size"], "options are written key=value"),
        (["frozenlake", "--max-sessions", "0"], "max_sessions must be an int >= 1"),
        (["frozenlake", "--step-timeout", "-1"], "step_timeout_s must be a positive number"),
        (["frozenlake", "--port", "70000"], "--port must be in 0..65535"),
        (["frozenlake", "--token-file", "/nonexistent/token"], "No such file or directory"),
    ],
)
def test_user_errors_are_one_line(capsys, args, message):
    assert main(["serve-env", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl serve-env: ") and message in err and err.count("\n") == 1


def test_an_empty_token_file_is_refused(capsys, tmp_path):
    (tmp_path / "token").write_text("  \n")
    assert main(["serve-env", "frozenlake", "--token-file", str(tmp_path / "token")]) == 2
    assert "must hold one token" in capsys.readouterr().err


def test_the_openenv_env_needs_a_url():
    with pytest.raises(ValueError, match="needs the server's url"):
        make("openenv")
    with pytest.raises(ValueError, match="starts with http://"):
        make("openenv", url="ftp://127.0.0.1:1")


def test_the_served_env_passes_the_contract_checker():
    with served("sokoban") as (url, _):
        env = make("openenv", url=url)
        check_env(env)
        env.close()


def test_play_against_a_dead_server_names_the_failure(capsys, monkeypatch):
    """The real client against a port where nothing listens: one line naming remote_refused, exit 2, instead of
    "episode over: success=False, return=0"."""
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("Up\n"))
    assert main(["play", "openenv", "url=http://127.0.0.1:9", "timeout_s=5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirl play: openenv: remote_refused (") and "nothing is listening" in err
    assert err.count("\n") == 1


def test_the_readme_serve_command_serves():
    """README's `mirl serve-env frozenlake --port 8000` (on a free port here): it says where it serves, then
    serves until stopped (tests/trainer/test_readme_commands.py runs the README's other commands)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mirl.cli", "serve-env", "frozenlake", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = [server.stdout.readline() for _ in range(1)]
        while "serving" not in lines[-1] and lines[-1] and len(lines) < 50:  # a library may warn first
            lines.append(server.stdout.readline())
        assert f"serving frozenlake on http://127.0.0.1:{port}" in lines[-1], lines
        env = make("openenv", url=f"http://127.0.0.1:{port}")
        observation, info = env.reset(seed=0)
        assert observation and "end_reason" not in info
        env.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
