"""``mirl envs`` lists the registered environments; ``mirl play ENV`` lets a person play one in the terminal.

``mirl play`` prints the instruction, the legend and the legal actions once, then exactly the observation text an
agent would be shown, and after each action its reward. Actions are read line by line from stdin, so a game can
be scripted (``printf 'Up\\nLeft\\n' | mirl play sokoban --seed 3``); it ends at EOF, on ``quit``, when the
episode terminates or is truncated, or when the env's action budget is spent. Blank lines are ignored. Arrow keys
(then Enter) are moves in an env with directions (one move per arrow); any other escape sequence a key sends is
refused as no action and costs nothing from the budget. An
action that starts with a line opening a code fence (```) runs on to the line that closes it, so a program can be
pasted as one answer (``mirl play deepcoder``, which then shows the verdict of every test).
Options are ``key=value`` words: ``true``/``false`` become bools, ``none`` None, numbers int or float, and a
comma-separated value a tuple (``num_numbers=3,4``).

An env that shows images (``mirl play sokoban render=image``, or ``render=both`` for the text board as well) has
each observation's images written as PNGs, ``step_000.png`` for the reset, ``step_001.png`` after the first
action, and so on (``step_001_2.png`` for a second image of one observation), into ``--image-dir`` (default
``mirl-play/<env>-seed<seed>/`` under the current directory); the observation is printed with each image
placeholder replaced by ``[image: <path>]``. A directory on that path that is a symbolic link is refused, and a
link planted at a PNG's name is replaced, never written through (:mod:`mirl.safeio`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

QUIT = "quit"
ARROWS = {"A": "Up", "B": "Down", "C": "Right", "D": "Left"}  # the final letter of each arrow key's sequence
_ESCAPE = re.compile(r"\x1b(?:\[[0-9;]*|O)?([A-Za-z~])")  # ESC [ A (normal mode), ESC O A (application mode)


def register(subparsers: argparse._SubParsersAction) -> None:
    envs = subparsers.add_parser(
        "envs",
        help="list the registered environments and their options",
        description="List the registered environments, each with its options (default value and meaning).",
    )
    envs.add_argument("names", nargs="*", metavar="ENV", help="show only these environments")
    envs.set_defaults(func=run_envs)
    play = subparsers.add_parser(
        "play",
        help="play an environment in the terminal (actions from stdin)",
        description="Play ENV yourself, seeing exactly what the agent sees: type an action (or an arrow key) per "
        "line, 'quit' to stop. Options after ENV are the env's own, written key=value.",
    )
    play.add_argument("env", metavar="ENV", help="a registered environment name (see `mirl envs`)")
    play.add_argument("--seed", type=int, default=0, help="instance seed (default 0)")
    play.add_argument(
        "--image-dir", default=None, metavar="DIR", help="where an env's images go (default mirl-play/ENV-seedN/)"
    )
    # REMAINDER, not "*": argparse (< 3.12) would bind an empty list before a --seed that follows ENV
    play.add_argument(
        "options", nargs=argparse.REMAINDER, metavar="KEY=VALUE", help="environment options, e.g. view=coordinates"
    )
    play.set_defaults(func=run_play)


def coerce(text: str) -> Any:
    """``key=value`` value text -> bool, None, int, float, tuple (comma-separated) or the text itself.

    >>> coerce("true"), coerce("none"), coerce("3"), coerce("0.5"), coerce("3,4"), coerce("grid")
    (True, None, 3, 0.5, (3, 4), 'grid')
    """
    if "," in text:
        return tuple(coerce(part.strip()) for part in text.split(",") if part.strip())
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def take_flag(words: list[str], flag: str) -> tuple[str | None, list[str]]:
    """Take the last ``FLAG VALUE`` / ``FLAG=VALUE`` out of the option words that follow ENV.

    >>> take_flag(["size=5", "--image-dir", "boards"], "--image-dir")
    ('boards', ['size=5'])
    """
    value, rest, words = None, [], list(words)
    while words:
        word = words.pop(0)
        if word == flag or word.startswith(f"{flag}="):
            value = word.partition("=")[2] if "=" in word else (words.pop(0) if words else "")
        else:
            rest.append(word)
    return value, rest


def split_seed(words: list[str], seed: int) -> tuple[int, list[str]]:
    """Take a ``--seed N`` / ``--seed=N`` that follows ENV out of the option words.

    >>> split_seed(["size=5", "--seed", "3"], 0)
    (3, ['size=5'])
    """
    value, rest = take_flag(words, "--seed")
    if value is not None:
        if not value.lstrip("-").isdigit():
            raise ValueError(f"--seed expects an integer, got {value!r}; e.g. --seed 3")
        seed = int(value)
    if not 0 <= seed < 2**63:  # the env seeds numpy's generator, which takes no negative seed
        raise ValueError(f"--seed must be an integer in [0, 2**63), got {seed}; e.g. --seed 3")
    return seed, rest


def parse_options(words: list[str]) -> dict[str, Any]:
    """``["size=5", "view=grid"]`` -> ``{"size": 5, "view": "grid"}``; a word without ``=`` is an error."""
    options: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"options are written key=value, got {word!r}; e.g. success_rate=1.0")
        options[key] = coerce(value)
    return options


def run_envs(args: argparse.Namespace) -> int:
    from mirl.envs import env_options, registry
    from mirl.errors import UserError

    names = args.names or sorted(registry)
    for name in names:
        if name not in registry:  # mirl.cli.main prints it as one line (or its traceback with --debug)
            raise UserError(f"unknown environment {name!r}; registered: {', '.join(sorted(registry))}")
    width = max(len(name) for name in names)
    for name in names:
        print(f"{name:<{width}}  {registry[name].description}")
        settings = [(f"{option}={default!r}", doc) for option, (default, doc) in env_options(name).items()]
        column = max((len(setting) for setting, _ in settings), default=0)
        for setting, doc in settings:
            print(f"    {setting:<{column}}  {doc}".rstrip())
    if "deepcoder" in names:  # what the code sandbox can guarantee on this machine
        from mirl.envs.code.deepcoder import SANDBOX_MODES
        from mirl.envs.code.sandbox import isolation_report

        print(f"\n{isolation_report()}\n{SANDBOX_MODES}")
    return 0


def _header(env: Any) -> str:
    lines = [env.instruction]
    if env.symbol_legend:
        lines.append(f"Symbols: {env.symbol_legend}")
    actions = ", ".join(env.action_words) if env.action_words else "free-form text"
    lines.append(f"Actions: {actions}. Action budget: {env.default_action_budget}. Type 'quit' to stop.")
    if env.action_words is None:
        lines.append("A multi-line answer starts with a ``` line and ends with the next ``` line.")
    return "\n".join(lines)


def read_action(stream) -> str:
    """The next action from ``stream``: one line, or a fenced block from its ``` line to the closing one ("" at EOF).

    >>> import io
    >>> read_action(io.StringIO("```python\\nprint(1)\\n```\\nnext\\n"))
    '```python\\nprint(1)\\n```'
    """
    line = stream.readline()
    if not line.lstrip().startswith("```"):
        return line
    block = [line]
    while (more := stream.readline()) and not more.strip().startswith("```"):
        block.append(more)
    return "".join(block + [more]).rstrip("\n")


def key_actions(line: str, action_words: tuple[str, ...] | None) -> list[str] | None:
    r"""The actions one input line stands for: ``[]`` for a blank line, the line itself, or, for a line of arrow
    keys (the terminal sends each as an escape sequence such as ``ESC [ A``), one move per arrow when the env has
    that direction word. None when the line holds an escape sequence that is not such an arrow: it is no action.

    >>> key_actions("\x1b[A\x1b[D\n", ("Left", "Down", "Right", "Up")), key_actions("Up\n", None)
    (['Up', 'Left'], ['Up'])
    >>> key_actions("\x1b[A\n", None), key_actions("\x1b[5~\n", ("Up",)), key_actions("  \n", None)
    (None, None, [])
    """
    text = line.rstrip("\n")
    if "\x1b" not in text:
        return [text] if text.strip() else []
    keys = _ESCAPE.findall(text)
    words = {word.casefold(): word for word in action_words or ()}
    moves = [words.get(ARROWS.get(key, "").casefold()) for key in keys]
    if not keys or None in moves or _ESCAPE.sub("", text).strip():
        return None
    return moves


def invalid_note(env: Any) -> str:
    """What ``mirl play`` says after an invalid action: the valid words again, where the env has a fixed set."""
    words = f"; valid: {', '.join(env.action_words)}" if env.action_words else ""
    return f"invalid action: nothing happened{words}"


def _example(env: Any) -> str:
    return env.action_words[0] if env.action_words else "an answer"


class ImageFiles:
    """Writes the images of each observation ``mirl play`` shows as PNGs (module docstring); makes its directory
    only when the first image comes, so a text env leaves nothing behind."""

    def __init__(self, directory: Path, default_root: Path | None = None) -> None:
        self.directory, self.default_root, self.step = directory, default_root, 0

    def show(self, observation: str, info: dict[str, Any]) -> str:
        """``observation`` with each image placeholder replaced by ``[image: <path of the PNG written>]``."""
        from mirl.envs.images import IMAGE_PLACEHOLDER, observation_images, png_bytes
        from mirl.safeio import atomic_write_bytes, ensure_dir

        images, shown = observation_images(observation, info), observation
        if images and self.default_root is not None:
            ensure_dir(self.default_root)  # refuses a planted link at mirl-play/ as well as at its subdirectory
        root = self.default_root or self.directory  # the folder the user named (or mirl-play/): no link from it down
        for number, image in enumerate(images, start=1):
            suffix = f"_{number}" if number > 1 else ""
            path = ensure_dir(self.directory, root) / f"step_{self.step:03d}{suffix}.png"
            atomic_write_bytes(path, png_bytes(image), root=root)
            shown = shown.replace(IMAGE_PLACEHOLDER, f"[image: {path}]", 1)
        self.step += 1
        return shown


def _image_files(args: argparse.Namespace, words: list[str], env_name: str, seed: int) -> tuple[ImageFiles, list]:
    chosen, rest = take_flag(words, "--image-dir")
    chosen = chosen if chosen is not None else args.image_dir
    if chosen is not None:
        if not chosen.strip():
            raise ValueError("--image-dir expects a directory, got ''; e.g. --image-dir boards")
        return ImageFiles(Path(chosen)), rest
    root = Path("mirl-play")
    return ImageFiles(root / f"{env_name}-seed{seed}", default_root=root), rest


def _refuse_failed(name: str, info: dict) -> None:
    """An env whose infrastructure failed (a remote env's server unreachable, a timeout) is an error naming the
    failure, not an episode that ends with return 0 (:mod:`mirl.rollout.failures`)."""
    from mirl.rollout.failures import HINTS, InfrastructureError, is_infrastructure

    reason = info.get("end_reason")
    if is_infrastructure(reason):
        detail = info.get("remote_error") or "no detail"
        raise InfrastructureError(f"{name}: {reason} ({detail}); {HINTS.get(reason, 'see the env server log')}")


def run_play(args: argparse.Namespace) -> int:
    from mirl.envs import make

    if "--debug" in args.options:  # REMAINDER swallows a --debug written after ENV; honour it as mirl.cli.main does
        args.debug = True
    options = [word for word in args.options if word != "--debug"]
    seed, words = split_seed(options, args.seed)  # a ValueError is a user error (mirl.cli.main)
    files, words = _image_files(args, words, args.env, seed)
    env = make(args.env, **parse_options(words))
    observation, info = env.reset(seed=seed)
    _refuse_failed(env.name, info)
    print(f"== {env.name} (seed {seed}) ==\n{_header(env)}\n\n{files.show(observation, info)}", flush=True)
    total, used, done = 0.0, 0, False
    while not done:
        if sys.stdin.isatty():
            print("> ", end="", flush=True)
        line = read_action(sys.stdin)
        if not line or line.strip().lower() == QUIT:
            break
        actions = key_actions(line, env.action_words)
        if actions is None:
            print(f"(not an action: a key other than an arrow; type an action such as {_example(env)})", flush=True)
        for action in actions or ():
            observation, reward, terminated, truncated, info = env.step(action)
            _refuse_failed(env.name, info)
            total, used = total + reward, used + 1
            note = "" if info["action_valid"] else f"  ({invalid_note(env)})"
            print(f"\nreward: {reward:g}  return: {total:g}  actions: {used}/{env.default_action_budget}{note}")
            print(files.show(observation, info), flush=True)
            done = terminated or truncated or used >= env.default_action_budget
            if done:
                break
    if done:
        print(f"\nepisode over: success={info['success']}, return={total:g}, actions={used}")
    return 0
