"""`run_config.json`: one run per `output_dir`, refused before any of its files is touched.

An `output_dir` holds one run's features, checkpoints and best weights; a second run with other
settings would mix them. `identity` (task, labels, sequence length, casing, ...) must match any
earlier run; `training` (learning rate, batch, steps, initial weights; None when not training)
must match too when a training checkpoint is there to resume from: resuming with another schedule
is never what was meant.
"""
from __future__ import annotations

import json
import os

from engine.errors import SettingsError
from engine.training import is_training_checkpoint
from modeling.atomic_files import write_text

RUN_CONFIG = "run_config.json"


class RunConfigError(SettingsError):
    """`output_dir` holds a run made with other settings."""


def check_run_config(output_dir: str, identity: dict, training: dict | None) -> None:
    """Refuse to mix runs in one `output_dir` (writes nothing)."""
    path = os.path.join(output_dir, RUN_CONFIG)
    current = _canonical(identity, training)
    previous = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
    if previous:
        groups = ["identity"]
        if training is not None and previous.get("training") is not None and any(
                is_training_checkpoint(name) for name in os.listdir(output_dir)):
            groups.append("training")
        changed = [f"{key} was {previous[group].get(key)!r}, now {value!r}"
                   for group in groups for key, value in current[group].items()
                   if previous[group].get(key) != value]
        if changed:
            raise RunConfigError(f"{output_dir} holds a run with other settings "
                                 f"({'; '.join(changed)}): use another --output_dir, or empty it")


def record_run_config(output_dir: str, identity: dict, training: dict | None) -> None:
    """Record this run's settings (when it trains), once `check_run_config` has passed."""
    if training is not None:
        write_text(os.path.join(output_dir, RUN_CONFIG),
                   json.dumps(_canonical(identity, training), indent=1, sort_keys=True) + "\n")


def _canonical(identity: dict, training: dict | None) -> dict:
    return json.loads(json.dumps({"identity": identity, "training": training}))
