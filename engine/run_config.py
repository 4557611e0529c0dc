"""`run_config.json`: one run per `output_dir`, refused before any of its files is touched.

An `output_dir` holds one run's features, checkpoints and best weights; a second run with other
settings would mix them. The file records which kind of run made the folder (`fine-tuning` or
`pretraining`), its `identity` (task, labels, sequence length, casing, ...), which must match any
earlier run, and its `training` settings (learning rate, batch, steps, initial weights; None when
it did not train), which must match too when a training checkpoint is there to resume from:
resuming with another schedule is never what was meant. A folder of the other kind is refused
outright, as is a folder holding training checkpoints that no run_config.json explains. Keys an
older version did not record are not compared. A fine-tuning run also records `best_metric`, the
evaluation key its `best/` weights are kept by, for what reads its results (a search of runs).

A folder remembers the Keras backend that trained it (`backend`; for a folder of an older version,
its checkpoints say: TensorFlow's `model.ckpt-N.index`, JAX's `model.ckpt-N.safetensors`). Its
checkpoints resume only there, so training in it on another backend is refused in one line naming
the backend that wrote it, where it would have started again from step 0 beside the other
backend's checkpoint. Evaluating, predicting and exporting its kept weights on another backend
(`--do_train` left out) is the documented way to export a JAX run, and stays allowed.
"""
from __future__ import annotations

import json
import os

from bert_tf2.process import environment
from bert_tf2.process.atomic_files import write_text
from bert_tf2.process.errors import SettingsError

RUN_CONFIG = "run_config.json"
FINE_TUNING = "fine-tuning"
PRETRAINING = "pretraining"
# What a fine-tuning run leaves that a pretraining run never does (folders of older versions,
# which recorded no kind, or evaluation-only runs, which recorded no file).
_FINE_TUNING_MARKS = ("best", "train.tf_record.json", "dev.tf_record.json",
                      "eval.tf_record.json", "test.tf_record.json")


class RunConfigError(SettingsError):
    """`output_dir` holds a run made with other settings, or by another tool."""


def read_run_config(output_dir: str) -> dict | None:
    """The recorded run (None when there is none); a damaged file is a one-line error."""
    from bert_tf2.data_gen.errors import DataError

    path = os.path.join(output_dir, RUN_CONFIG)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a run_config.json this project wrote ({e}); use another "
                        f"--output_dir, or remove the file if the folder is yours") from None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("identity"), dict):
        raise DataError(f"{path}: not a run_config.json this project wrote (no identity); use "
                        f"another --output_dir")
    return recorded


def check_run_config(output_dir: str, identity: dict, training: dict | None,
                     kind: str = FINE_TUNING) -> None:
    """Refuse to mix runs in one `output_dir` (writes nothing)."""
    from bert_tf2.engine.trainer_config import is_training_checkpoint

    current = _canonical(kind, identity, training)
    previous = read_run_config(output_dir)
    names = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    has_checkpoints = any(is_training_checkpoint(name) for name in names)
    if previous is None:
        other = _other_kind(kind, names, has_checkpoints)
        if other:
            raise RunConfigError(f"{output_dir} holds {other}: use another --output_dir")
        return
    previous_kind = previous.get("kind", FINE_TUNING)
    if previous_kind != kind:
        raise RunConfigError(f"{output_dir} holds a {previous_kind} run ({RUN_CONFIG}), not a "
                             f"{kind} one: use another --output_dir")
    trained_on = previous.get("backend") or _backend_of(names)
    if training is not None and trained_on and trained_on != environment.backend():
        raise RunConfigError(
            f"{output_dir} holds a run trained on KERAS_BACKEND={trained_on}, whose checkpoints "
            f"resume only there: run the same command with KERAS_BACKEND={trained_on} to go on "
            f"with it; leave --do_train out to evaluate, predict or export its weights on "
            f"{environment.backend()}; or use another --output_dir")
    groups = ["identity"]
    if training is not None and previous.get("training") is not None and has_checkpoints:
        groups.append("training")
    changed = [f"{key} was {previous[group][key]!r}, now {value!r}"
               for group in groups for key, value in current[group].items()
               if key in previous[group] and previous[group][key] != value]
    if changed:
        raise RunConfigError(f"{output_dir} holds a run with other settings "
                             f"({'; '.join(changed)}): run with the settings it was made "
                             f"with, or use another --output_dir (or empty it to start over)")


def _backend_of(names: list) -> str | None:
    """The backend whose training checkpoints a folder holds (older versions recorded none)."""
    from bert_tf2.engine.trainer_config import is_training_checkpoint

    checkpoints = [name for name in names if is_training_checkpoint(name)]
    if any(name.endswith(".safetensors") for name in checkpoints):
        return "jax"
    if any(name.endswith(".index") for name in checkpoints):
        return "tensorflow"
    return None


def _other_kind(kind: str, names: list, has_checkpoints: bool) -> str | None:
    """What another tool left in a folder with no run_config.json, if anything."""
    if kind == PRETRAINING and any(name in _FINE_TUNING_MARKS for name in names):
        return "a fine-tuning run's files (best/, features)"
    if kind == FINE_TUNING and has_checkpoints:
        return (f"training checkpoints but no {RUN_CONFIG} (another tool's run, such as "
                f"run_pretraining's)")
    return None


def record_run_config(output_dir: str, identity: dict, training: dict | None,
                      kind: str = FINE_TUNING, best_metric: str | None = None) -> None:
    """Record this run's settings once `check_run_config` has passed: always when it trains,
    else only when the folder has no record yet (an evaluation of a run keeps its record)."""
    path = os.path.join(output_dir, RUN_CONFIG)
    if training is not None or not os.path.isfile(path):
        recorded = _canonical(kind, identity, training)
        if training is not None:  # the backend whose checkpoints the folder holds
            recorded["backend"] = environment.backend()
        if best_metric:
            recorded["best_metric"] = best_metric
        write_text(path, json.dumps(recorded, indent=1, sort_keys=True) + "\n")


def _canonical(kind: str, identity: dict, training: dict | None) -> dict:
    return json.loads(json.dumps({"kind": kind, "identity": identity, "training": training}))
