"""Shared pieces of the remote-env tests: a scripted policy that depends only on what it sees, episode comparison,
and ``mirl serve-env`` started as a real process on a free loopback port."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

from mirl.config import RolloutConfig
from mirl.envs import make
from mirl.policy.scripted import ScriptedPolicy

FREE_FORM = ("42", "I will not use the format", "```python\nprint(sum(map(int, input().split())))\n```", "search[x]")
PLACEMENTS = ("1 2 1", "2 1 2", "2 3 3", "3 2 4", "4 4 1", "1 3 2")  # Sudoku placements, some on blank cells
EXTRA = {"sudoku": PLACEMENTS, "keysum": tuple("0123456789")}  # free-form answers an env accepts (keysum: a digit)


def policy_for(tokenizer, env: str, seed: int, options: dict | None = None) -> ScriptedPolicy:
    """Replies chosen by a hash of the decoded context among the env's action words and a few free-form answers:
    equal contexts get equal replies, so two runs agree exactly as long as everything they were shown agrees."""
    local = make(env, **(options or {}))
    local.reset(seed=seed)
    choices = list(local.action_words or ()) + list(FREE_FORM) + list(EXTRA.get(env, ()))
    local.close()

    def script(context: str) -> str:
        digest = int(hashlib.sha256(context.encode()).hexdigest(), 16)
        first, second = choices[digest % len(choices)], choices[(digest >> 8) % len(choices)]
        answer = first if digest % 3 else f"{first} || {second}"
        return f"step {digest % 97}</think><answer>{answer}</answer>"

    return ScriptedPolicy(tokenizer, script)


def rollout_config(**overrides) -> RolloutConfig:
    return RolloutConfig(**{"max_turns": 4, "max_actions_per_turn": 2, "max_new_tokens": 64, **overrides})


def assert_same_episodes(remote, local) -> None:
    """Token for token: every turn (contexts, replies, log-probs, observations, rewards, flags) and the outcome."""
    assert len(remote) == len(local)
    for theirs, ours in zip(remote, local, strict=True):
        assert theirs.system_prompt_ids == ours.system_prompt_ids
        assert theirs.turns == ours.turns
        assert (theirs.success, theirs.end_reason) == (ours.success, ours.end_reason)
        assert (theirs.group, theirs.sample) == (ours.group, ours.sample)


def server_python() -> str:
    """The Python that runs ``mirl serve-env``: ``$MIRL_SERVE_PYTHON`` (an environment with openenv, for the
    veRL and TRL environments that have only the client's ``websockets``), else this one."""
    return os.environ.get("MIRL_SERVE_PYTHON", sys.executable)


def skip_without_server() -> None:
    """Skip unless a server can start here and the client's ``websockets`` imports."""
    import importlib.util

    import pytest

    pytest.importorskip("websockets", reason="the openenv client needs websockets: pip install 'mirl[serve]'")
    if importlib.util.find_spec("openenv") is None and "MIRL_SERVE_PYTHON" not in os.environ:
        pytest.skip(
            "a server needs openenv 0.10: pip install 'mirl[serve]', or set MIRL_SERVE_PYTHON to a Python with it"
        )


@contextlib.contextmanager
def served(
    *args: str, env: dict | None = None, timeout: float = 180.0, open_files: int | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``mirl serve-env ARGS --port 0`` as a process; yields (its URL, the process) once it listens.
    ``open_files``: the soft limit on open files the process starts with."""
    command = [server_python(), "-m", "mirl.cli", "serve-env", *args, "--port", "0"]
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed in the finally below)

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=limit if open_files is not None else None,  # noqa: PLW1509 (only setrlimit, before exec)
    )
    try:
        line = _first_line(process, timeout)
        match = re.search(r"on (http://127\.0\.0\.1:\d+) ", line)
        if match is None:
            errors.seek(0)
            raise AssertionError(f"mirl serve-env did not start: {line!r} {errors.read()[-2000:]}")
        yield match.group(1), process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
        process.stdout.close()
        errors.close()


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""


def get(url: str, path: str, headers: dict | None = None, data: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
