"""Environments in other processes, over OpenEnv (the HTTP + WebSocket protocol of ``openenv-core``).

- ``server.py`` serves any registered mirl env: ``mirl serve-env NAME`` (one env instance per WebSocket session);
- ``openenv.py`` is the env ``openenv``: it plays a remote OpenEnv env (a mirl server or any other) through the
  rollout engine, with mirl's prompts, parser and budgets;
- ``wire.py`` is what both sides agree on (the action and observation models, images as PNG, size limits);
- ``client.py`` holds the sessions: one event loop and one deadline per call for every ``openenv`` env in a process.

``openenv-core`` is the optional extra ``serve``; nothing here is imported by ``mirl.envs`` until ``openenv`` is
made or a server is started.
"""
