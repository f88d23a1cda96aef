"""Serve a registered mirl env over OpenEnv, on the ``openenv`` package's own server (``HTTPEnvServer``).

``openenv`` gives every WebSocket connection (``/ws``) its own env instance and speaks its protocol (``reset`` /
``step`` / ``state`` / ``close`` messages; ``/health``, ``/schema``, ``/metadata``; the stateless ``/reset`` and
``/step`` HTTP routes build a fresh env per request, as OpenEnv defines them; the task API ``/list_environments``
and ``/{env}/splits``, ``/tasks``, ``/num_tasks``, ``/task``, ``/task_range``). mirl adds:

- :class:`ServedEnv`, the OpenEnv ``Environment`` around a mirl env: ``reset(seed, options)`` or
  ``reset(split, index)``, ``step(action)`` returning the text, the images as PNG, reward, the Gymnasium flags and
  the JSON-safe info (:mod:`mirl.envs.remote.wire`); the task API's ``TaskProvider`` methods list the trainer's
  train and validation splits (:mod:`mirl.envs.remote.tasks`). Each session's env runs on its own thread and every
  reset or step has a deadline: past it the caller gets an error and the session refuses further calls (a thread
  cannot be stopped; the env is closed once the late call returns).
- a cap on concurrent sessions (``openenv``'s ``max_concurrent_envs``) that stateless resets count against,
  idle expiry, bounded bodies and messages, an optional bearer token, deadlines on every request's headers and
  body, a cap on connections below the open-file limit, a bound on what a WebSocket leaves unread, no MCP, and 4xx
  for bad input (:mod:`.guard`);
- ``GET /capacity``: active sessions, the cap, and mirl env instances open in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import socket
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mirl.envs.remote import SERVE_EXTRA, tasks, wire
from mirl.envs.remote.guard import (
    Capacity,
    Guard,
    bounded_websocket_protocol,
    raise_file_limit,
    request_deadline_protocol,
)

INSTALL_HINT = f"serving an env needs openenv 0.10: {SERVE_EXTRA}"
FILES_RESERVED = 256  # descriptors kept free of connections: envs, sandboxes, logs and /health itself
UNREAD_SLACK_BYTES = 1 << 20  # a WebSocket may leave one reply and this much more unread before it is dropped


@dataclass(frozen=True)
class ServeSettings:
    """Limits of one server (each becomes a ``mirl serve-env`` flag)."""

    max_sessions: int = 256  # concurrent sessions (env instances): a default rollout's 128 episodes, as the client
    step_timeout_s: float = 60.0  # deadline of one reset or step
    idle_timeout_s: float = 300.0  # a session with no message for this long is closed
    header_timeout_s: float = 10.0  # each request's headers, and then its body, must arrive within this
    max_message_bytes: int = wire.MAX_MESSAGE_BYTES  # one request body or WebSocket message at most
    token: str | None = None  # bearer token every route but /health requires (None: no token)

    def __post_init__(self) -> None:
        if isinstance(self.max_sessions, bool) or not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise ValueError(f"max_sessions must be an int >= 1, got {self.max_sessions!r}")
        for name in ("step_timeout_s", "idle_timeout_s", "header_timeout_s"):
            if not 0 < getattr(self, name) < 1e6:
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)!r}")
        if not 1024 <= self.max_message_bytes <= 1 << 30:
            raise ValueError(f"max_message_bytes must be in 1024..2**30, got {self.max_message_bytes!r}")


class BadRequest(ValueError):
    """A client's reset or step that cannot be served as sent (answered with 422 over HTTP, an error message over
    the WebSocket)."""


REQUEST_ERRORS = (BadRequest, tasks.TaskRequestError)  # answered with 422


_open_envs = 0  # mirl env instances built and not yet closed, in this process
_count_lock = threading.Lock()


def _count(delta: int) -> None:
    global _open_envs
    with _count_lock:
        _open_envs += delta


def open_envs() -> int:
    """mirl env instances built by served sessions in this process and not yet closed."""
    return _open_envs


def _served_env_class():
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import EnvironmentMetadata, State

    _, observation_cls = wire.models()

    class ServedEnv(Environment):
        """One session's mirl env; every call runs on the session's own thread, within the deadline."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # each session builds its own env instance

        def __init__(self, name: str, options: Mapping[str, Any], deadline_s: float) -> None:
            super().__init__()
            self._name, self._options, self._deadline = name, dict(options), deadline_s
            self._env, self._worker, self._broken, self._steps = None, None, None, 0
            self._closed, self._built_for = False, None  # the split the env was built for (None: as served)

        async def reset_async(self, seed=None, episode_id=None, options=None, split=None, index=None, **extra):
            if extra:
                raise BadRequest(f"unknown reset fields {sorted(extra)}; send seed and options, or split and index")
            build = None
            if split is not None or index is not None:
                seed, build = tasks.reset_target(self._name, self._options, split, index, seed)
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
                raise BadRequest(f"seed must be a non-negative int or null, got {seed!r}")
            if options is not None and not isinstance(options, dict):
                raise BadRequest(f"options must be an object or null, got {type(options).__name__}")
            if options:
                raise BadRequest(
                    f"a served mirl env takes no reset options, got {sorted(options)}; pass settings when serving "
                    f"(mirl serve-env {self._name} key=value)"
                )
            return await self._call(functools.partial(self._reset, seed, build))

        async def step_async(self, action, timeout_s=None, **extra):
            if self._env is None:
                raise BadRequest(
                    "step before reset: a stateless /step has no episode to step; open a session at /ws, reset, "
                    "then step"
                )
            return await self._call(functools.partial(self._step, action.action))

        def reset(self, seed=None, episode_id=None, **extra):  # OpenEnv's abstract sync API; the async one is used
            raise NotImplementedError("ServedEnv is asynchronous: openenv calls reset_async")

        def step(self, action, timeout_s=None, **extra):
            raise NotImplementedError("ServedEnv is asynchronous: openenv calls step_async")

        # OpenEnv's TaskProvider (its task API routes call these on a fresh instance; nothing is built)
        def list_splits(self):
            return [{"name": split, "type": split} for split in tasks.served_splits(self._name, self._options)]

        def num_tasks(self, split):
            tasks.check_split(split, tasks.served_splits(self._name, self._options))
            return tasks.TASKS_PER_SPLIT

        def get_task(self, split, index):
            split = tasks.check_split(split, tasks.served_splits(self._name, self._options))
            return tasks.task_spec(self._name, split, tasks.check_index(index))

        def get_task_range(self, split, start=None, stop=None):
            split = tasks.check_split(split, tasks.served_splits(self._name, self._options))
            return tasks.task_range(self._name, split, start, stop)

        def list_tasks(self, split):  # a preview, as OpenEnv allows for large splits: num_tasks has the count
            return self.get_task_range(split, 0, tasks.MAX_LISTED_TASKS)

        @property
        def state(self):
            return State(step_count=self._steps)

        def get_metadata(self):
            from mirl.envs import registry
            from mirl.version import __version__

            description = registry[self._name].description or f"mirl env {self._name}"
            return EnvironmentMetadata(name=f"mirl/{self._name}", description=description, version=__version__)

        async def _call(self, work):
            if self._closed or self._broken:
                raise RuntimeError(self._broken or "this session was closed (idle too long); reconnect and reset")
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mirl-{self._name}")
            future = asyncio.get_running_loop().run_in_executor(self._worker, work)
            try:
                return await asyncio.wait_for(future, self._deadline)
            except TimeoutError:
                self._broken = f"deadline: a call took longer than {self._deadline:g} s; this session is over"
                raise RuntimeError(self._broken) from None

        def _reset(self, seed, build):
            from mirl.envs import make

            if self._env is not None and build != self._built_for:  # a task of another split: its own env
                self._close_env()
            if self._env is None:
                options = self._options if build is None else {**self._options, "split": build}
                self._env = make(self._name, **options)
                self._built_for = build
                _count(+1)
            observation, info = self._env.reset(seed=seed)
            self._steps = 0
            return _observation(observation_cls, (observation, 0.0, False, False, info), wire.agent_facts(self._env))

        def _step(self, action: str):
            self._steps += 1
            return _observation(observation_cls, self._env.step(action), None)

        def close(self) -> None:
            self._closed = True
            if self._worker is not None:
                self._worker.submit(self._close_env)  # after any late call still running on it
                self._worker.shutdown(wait=False)
                self._worker = None

        def _close_env(self) -> None:
            if self._env is not None:
                env, self._env = self._env, None
                env.close()
                _count(-1)

    return ServedEnv


def _observation(observation_cls, result, agent):
    from mirl.envs.images import observation_images

    text, reward, terminated, truncated, info = result
    images = wire.encode_images(observation_images(text, info))
    return observation_cls(
        observation=text,
        images=images,
        terminated=bool(terminated),
        truncated=bool(truncated),
        info=wire.served_info(info),
        agent=agent,
        done=bool(terminated or truncated),
        reward=float(reward),
    )


def build_app(name: str, options: Mapping[str, Any], settings: ServeSettings):
    """The ASGI app serving env ``name`` built with ``options``; ``ValueError`` for a bad name or option,
    ``ImportError`` (with the install hint) without ``openenv``."""
    from mirl.envs.registry import check_options

    check_options(name, options)
    found = openenv_version()
    if found is None or not found >= (0, 10):
        raise ImportError(f"{INSTALL_HINT} ({installed_openenv(found)})")
    try:
        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from openenv.core.env_server.http_server import HTTPEnvServer
        from openenv.core.env_server.types import ConcurrencyConfig
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from None
    action_cls, observation_cls = wire.models()
    factory = functools.partial(_served_env_class(), name, dict(options), settings.step_timeout_s)
    # session_timeout: openenv's reaper ends sessions idle that long, whatever holds them
    limits = ConcurrencyConfig(max_concurrent_envs=settings.max_sessions, session_timeout=settings.idle_timeout_s)
    server = HTTPEnvServer(factory, action_cls, observation_cls, concurrency_config=limits, env_name=name)
    app = FastAPI(title=f"mirl env {name} (OpenEnv)", docs_url=None, redoc_url=None)
    server.register_routes(app)

    async def bad_request(request, error: ValueError):
        from fastapi.responses import JSONResponse

        return JSONResponse({"detail": str(error)}, status_code=422)

    async def invalid_request(request, error):
        from fastapi.responses import JSONResponse

        # FastAPI's own answer echoes each input, and an input JSON cannot hold (inf) made it a 500
        fields = ("type", "loc", "msg")
        detail = [{key: entry[key] for key in fields if key in entry} for entry in error.errors()[:8]]
        return JSONResponse({"detail": detail}, status_code=422)

    for error_class in REQUEST_ERRORS:
        app.add_exception_handler(error_class, bad_request)
    app.add_exception_handler(RequestValidationError, invalid_request)

    @app.get("/capacity")
    def capacity() -> dict[str, int]:
        return {
            "active_sessions": server.active_sessions,
            "max_sessions": settings.max_sessions,
            "open_envs": open_envs(),
        }

    return Guard(
        app,
        max_bytes=settings.max_message_bytes,
        idle_s=settings.idle_timeout_s,
        body_s=settings.header_timeout_s,
        token=settings.token,
        capacity=Capacity(settings.max_sessions, lambda: server.active_sessions, open_envs),
    )


def installed_openenv(found: tuple[int, int] | None) -> str:
    """What stands in the way of openenv 0.10, in words: nothing installed, the old ``openenv-core`` (its modules
    share the folder, so it must go first), or an older ``openenv``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        core = version("openenv-core")
    except PackageNotFoundError:
        core = None
    if core is not None:
        return f"found openenv-core {core}, which installs the same modules: pip uninstall openenv-core first"
    return "no openenv is installed" if found is None else f"found openenv {'.'.join(map(str, found))}"


def openenv_version() -> tuple[int, int] | None:
    """``(major, minor)`` of the installed ``openenv`` distribution; None without it (openenv-core 0.3 installs the
    same ``openenv`` modules under another distribution name)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = version("openenv").split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except (PackageNotFoundError, ValueError):
        return None


def uvicorn_server(app, sock: socket.socket, settings: ServeSettings):
    """A ``uvicorn.Server`` for ``app`` on the bound socket ``sock`` (run it with ``server.run(sockets=[sock])``)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    files = raise_file_limit()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=request_deadline_protocol(settings.header_timeout_s, max_connections=max(16, files - FILES_RESERVED)),
        ws=bounded_websocket_protocol(settings.max_message_bytes + UNREAD_SLACK_BYTES),
        ws_max_size=settings.max_message_bytes,
        h11_max_incomplete_event_size=64 << 10,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    return uvicorn.Server(config)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_forever(
    name: str, options: Mapping[str, Any], settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000
) -> None:
    """Serve env ``name`` on ``host:port`` until interrupted; first prints one line saying where it listens,
    whether other machines can reach it and whether it wants a token (``mirl serve-env`` and ``Task.serve``)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535 (0 picks a free one), got {port!r}")
    app = build_app(name, options, settings)
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    reach = (
        "loopback only: other machines cannot connect"
        if is_loopback(host)
        else "reachable from other machines" + ("" if settings.token else "; WARNING: no token, anyone can connect")
    )
    auth = "bearer token required" if settings.token else "no token"
    print(
        f"mirl serve-env: serving {name} on http://{bound_host}:{bound_port} (WebSocket /ws; {reach}; {auth}; "
        f"at most {settings.max_sessions} sessions)",
        flush=True,
    )
    uvicorn_server(app, sock, settings).run(sockets=[sock])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    return sock


@contextlib.contextmanager
def serving(name: str, options: Mapping | None = None, settings: ServeSettings | None = None) -> Iterator[str]:
    """Serve env ``name`` on a free loopback port from a background thread; yields its ``http://`` URL.

    The same app and limits as ``mirl serve-env``; for tests and benchmarks in one process.
    """
    settings = settings or ServeSettings()
    sock = bind("127.0.0.1", 0)
    with running(uvicorn_server(build_app(name, options or {}, settings), sock, settings), sock) as url:
        yield url


@contextlib.contextmanager
def running(server, sock: socket.socket) -> Iterator[str]:
    """Run the ``uvicorn.Server`` ``server`` on the bound loopback socket ``sock`` from a background thread until the
    block ends; yields its ``http://`` URL once it has started."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
