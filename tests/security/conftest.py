"""The trainer's fixtures (a tiny model taught the reply format, saved as a model directory; small run configs),
for the probes that need a real run."""

from ..trainer.conftest import cli_args, formatted_policy, model_dir, pick_env, run_config  # noqa: F401
