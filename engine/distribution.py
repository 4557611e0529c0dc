"""Distribution strategies and precision policies, chosen by name as the runners' flags say.

one_device (CPU or the first GPU), mirrored (all local GPUs), multi_worker_mirrored (machines
named in TF_CONFIG), tpu (a TPU by name or address, as the original's `--tpu_name`).
"""
from __future__ import annotations

import json
import os

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
DTYPES = ("float32", "mixed_float16", "mixed_bfloat16")


def get_strategy(name: str = "one_device", tpu_address: str | None = None):
    import tensorflow as tf

    if name == "one_device":
        device = "/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("distribution_strategy=multi_worker_mirrored needs TF_CONFIG, e.g. "
                             + json.dumps({"cluster": {"worker": ["host1:12345", "host2:12345"]},
                                           "task": {"type": "worker", "index": 0}}))
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown distribution_strategy {name!r}; one of {', '.join(STRATEGIES)}")


def writes_outputs(name: str) -> bool:
    """Whether this process writes the run's outputs (and so holds them), known before the
    strategy is built: always, but for the non-chief workers that TF_CONFIG names (the chief is
    task `chief`, or `worker` 0 when there is none), as `engine.training.is_chief` decides."""
    if name != "multi_worker_mirrored":
        return True
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError:
        return True  # get_strategy reports the bad TF_CONFIG
    task = config.get("task") or {}
    kind, index = task.get("type"), int(task.get("index", 0))
    return kind in (None, "chief") or (kind == "worker" and index == 0
                                       and "chief" not in (config.get("cluster") or {}))


def set_precision(dtype: str) -> None:
    """Set the global Keras dtype policy; variables stay float32 under the mixed ones."""
    import keras

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")
    keras.config.set_dtype_policy(dtype)
