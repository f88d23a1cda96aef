"""Environments in other processes, over OpenEnv (the HTTP + WebSocket protocol of the ``openenv`` package).

- ``server.py`` serves any registered mirl env: ``mirl serve-env NAME`` (one env instance per WebSocket session);
- ``tasks.py`` is what a served env lists through OpenEnv's task API: the trainer's train and validation splits;
- ``openenv.py`` is the env ``openenv``: it plays a remote OpenEnv env (a mirl server or any other) through the
  rollout engine, with mirl's prompts, parser and budgets;
- ``wire.py`` is what both sides agree on (the action and observation models, images as PNG, size limits);
- ``client.py`` holds the sessions: one event loop and one deadline per call for every ``openenv`` env in a process;
  ``task_client.py`` asks a server which tasks it lists.

``openenv`` is the optional extra ``serve``; nothing here is imported by ``mirl.envs`` until ``openenv`` is made or
a server is started. The client needs only ``websockets``.
"""

# the one install hint of the serve extra, in the README, the docs and every error: an installed mirl takes the
# extra by name, a clone installed with `pip install -e .` takes it from its own folder
SERVE_EXTRA = "pip install 'mirl[serve]' (in a clone of mirl: pip install -e '.[serve]')"
