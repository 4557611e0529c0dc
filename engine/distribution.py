"""Distribution strategies and precision policies, chosen by name as the runners' flags say.

one_device (CPU or the first GPU), mirrored (all local GPUs), multi_worker_mirrored (machines
named in TF_CONFIG), tpu (a TPU by name or address, as the original's `--tpu_name`).

On JAX the same names mean the same spread (`KerasStrategy`, over `keras.distribution`):
one_device is the first local device; mirrored is data parallel over every local device (each
batch split along its rows, the weights replicated); multi_worker_mirrored is data parallel over
the devices of several processes, started by `jax.distributed.initialize` from TF_CONFIG's worker
list (the first worker is the coordinator) or from JAX's own variables (JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID; or a cluster JAX detects: Cloud TPU, SLURM); tpu is data
parallel over the TPU cores JAX sees (run on the TPU VM itself).
"""
from __future__ import annotations

import contextlib
import json
import os

from bert_tf2.process.errors import SettingsError

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
DTYPES = ("float32", "mixed_float16", "mixed_bfloat16")


def get_strategy(name: str = "one_device", tpu_address: str | None = None):
    from bert_tf2.process import environment

    if not environment.uses_tensorflow():
        return KerasStrategy.create(name)
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


def bfloat16_in_hardware() -> bool:
    """Whether this process trains on a device with bfloat16 arithmetic: a TPU, a GPU of compute
    capability 8.0 or more (A100, H100, ...), or, on TensorFlow with neither, a CPU with AMX
    (Intel from Sapphire Rapids on), where oneDNN multiplies in bfloat16; the budget recipe's
    dtype. Not other CPUs, nor JAX's CPU backend."""
    from bert_tf2.process import environment

    if environment.uses_tensorflow():
        import tensorflow as tf

        if tf.config.list_physical_devices("TPU"):
            return True
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return cpu_computes_bfloat16()
        return any(tf.config.experimental.get_device_details(gpu).get(
            "compute_capability", (0, 0)) >= (8, 0) for gpu in gpus)
    import jax

    device = jax.devices()[0]
    if device.platform == "tpu":
        return True
    return device.platform == "gpu" and float(getattr(device, "compute_capability", 0)) >= 8.0


def cpu_computes_bfloat16() -> bool:
    """Whether TensorFlow on this CPU multiplies in bfloat16 natively: AMX, through oneDNN (not
    when TF_ENABLE_ONEDNN_OPTS=0 leaves TensorFlow's own kernels)."""
    return "amx_bf16" in cpu_flags() and os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0"


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset:
    """The CPU's feature flags (Linux's /proc/cpuinfo); empty where they cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f
                                   if line.startswith("flags")), ()))
    except OSError:
        return frozenset()


def set_random_seed(seed: int) -> None:
    """`keras.utils.set_random_seed` (Python's, NumPy's and Keras's seeds), with TensorFlow's
    seeded only where TensorFlow is the backend or already imported. Keras's own imports
    TensorFlow wherever it is installed, to seed it: on JAX, which never uses TensorFlow here,
    that import cost every run about 2 s and TensorFlow's memory and threads."""
    import sys

    import keras

    from bert_tf2.process import environment

    try:  # Keras's lazy `tensorflow` module, imported on asking `available`; Keras 3.10-3.15
        from keras.src.utils import rng_utils

        lazy = rng_utils.tf
        unasked = vars(lazy).get("_available", False) is None
    except (ImportError, AttributeError, TypeError):  # another layout: Keras's own, as it is
        unasked = False
    if environment.uses_tensorflow() or "tensorflow" in sys.modules or not unasked:
        keras.utils.set_random_seed(seed)
        return
    lazy._available = False
    try:
        keras.utils.set_random_seed(seed)
    finally:
        lazy._available = None


def set_precision(dtype: str) -> None:
    """Set the global Keras dtype policy; variables stay float32 under the mixed ones.

    mixed_float16 on TensorFlow with no GPU: Grappler's remapper, which fuses a MatMul with its
    BiasAdd, is turned off. On CPUs with AVX512-FP16 (Intel Sapphire Rapids) oneDNN runs the
    fused float16 op on its reference code: a [512, 384] x [384, 1536] MatMul with BiasAdd took
    2,222 ms instead of 3.1 ms unfused (4.3 ms in float32; TensorFlow 2.21, 2 cores, 2026-11-30),
    and one MiniLM step minutes."""
    import keras

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")
    keras.config.set_dtype_policy(dtype)
    from bert_tf2.process import environment

    if dtype == "mixed_float16" and environment.uses_tensorflow():
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            tf.config.optimizer.set_experimental_options({"remapping": False})


class KerasStrategy:
    """What the JAX trainer needs of a strategy: its devices (one process's, or all processes'),
    which process this is, and how a host batch is laid out on the devices. Data parallel over
    several devices is `keras.distribution.DataParallel`, set before any model is built so that
    every variable is replicated."""

    def __init__(self, name: str, devices: list, process_index: int = 0, num_processes: int = 1):
        self.name = name
        self.devices = devices
        self.num_replicas_in_sync = len(devices)
        self.process_index = process_index
        self.num_processes = num_processes
        self.distribution = None
        if len(devices) > 1:
            import keras

            self.distribution = keras.distribution.DataParallel(devices=devices)
            keras.distribution.set_distribution(self.distribution)

    @classmethod
    def create(cls, name: str) -> "KerasStrategy":
        import keras

        if keras.backend.backend() != "jax":
            if name != "one_device":
                raise SettingsError(f"--distribution_strategy={name} runs on TensorFlow and JAX; "
                                    f"on {keras.backend.backend()} only one_device")
            return cls(name, ["default"])
        import jax

        _use_compilation_cache(jax)
        if name == "one_device":
            return cls(name, jax.local_devices()[:1])
        if name == "mirrored":
            return cls(name, jax.local_devices())
        if name == "multi_worker_mirrored":
            _initialize_jax_processes()
            return cls(name, jax.devices(), jax.process_index(), jax.process_count())
        if name == "tpu":
            if jax.default_backend() != "tpu":
                raise SettingsError("--distribution_strategy=tpu (--use_tpu) on JAX runs on a TPU "
                                    "VM, where JAX sees the TPU cores; JAX sees "
                                    f"{jax.default_backend()} devices here")
            if jax.process_count() == 1:
                with contextlib.suppress(RuntimeError, ValueError):
                    jax.distributed.initialize()  # a pod slice's hosts find each other
            return cls(name, jax.devices(), jax.process_index(), jax.process_count())
        raise ValueError(f"unknown distribution_strategy {name!r}; one of {', '.join(STRATEGIES)}")

    def scope(self):
        return contextlib.nullcontext()

    def input_context(self):
        """This process's input pipeline: one per process, each batching its share."""
        from bert_tf2.data_gen.numpy_datasets import HostInputContext

        return HostInputContext(self.num_processes, self.process_index, self.num_replicas_in_sync)

    def commit(self, values):
        """`values` (arrays, in any nesting) committed to the one device. A variable's first
        value is not committed to a device, while a step's outputs are (its batch is put on the
        device); JAX compiles a step once for each, so a run's second step compiled it again."""
        if self.distribution is not None or self.devices == ["default"]:
            return values  # laid out by the distribution already; or not on JAX
        import jax

        return jax.device_put(values, self.devices[0])

    def put(self, batch: dict) -> dict:
        """A host batch (NumPy arrays) on the devices: split along its rows over them (the rows
        must divide evenly; several processes each give their own share)."""
        import jax
        import numpy as np

        if self.distribution is None:
            if self.devices == ["default"]:  # not on JAX
                return batch
            return jax.device_put(batch, self.devices[0])

        rows = len(next(iter(batch.values())))
        local = self.num_replicas_in_sync // self.num_processes
        if rows % local:
            raise SettingsError(f"a batch of {rows} rows does not split over {local} devices: "
                                f"make the batch sizes (--train_batch_size, --eval_batch_size) "
                                f"multiples of {self.num_replicas_in_sync}")

        layout = self.distribution.get_data_layout
        placed = {}
        for name, value in batch.items():
            value = np.asarray(value)
            sharding = layout(value.shape).backend_layout
            placed[name] = jax.make_array_from_process_local_data(sharding, value)
        return placed


def processes_of(strategy) -> int:
    """The processes that run one training step together: several only for JAX's
    multi-process strategies (TensorFlow's workers each run their own step)."""
    return strategy.num_processes if isinstance(strategy, KerasStrategy) else 1


def _use_compilation_cache(jax) -> None:
    """Keep compiled steps on disk, so that a resumed run, a predict-only run or the next trial
    of a search with the same shapes loads them instead of compiling again (MiniLM's training
    step: 4.3 s to compile, 1.8 s from the cache). JAX's own JAX_COMPILATION_CACHE_DIR wins;
    JAX_ENABLE_COMPILATION_CACHE=false turns it off. Compiles of 0.1 s and more are kept, not
    only JAX's default of 1 s and more: building a model runs each initializer once per weight
    shape, and on a CPU those compiles (0.05-0.9 s each) add up to 5-10 s of every run's start;
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS wins."""
    if not os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    jax.config.update("jax_compilation_cache_dir", os.path.join(base, "bert-tf2", "jax"))


def _initialize_jax_processes() -> None:
    """`jax.distributed.initialize` from TF_CONFIG (the first worker coordinates), else from JAX's
    own environment variables or cluster detection."""
    import jax

    config = os.environ.get("TF_CONFIG")
    if not config:
        if not os.environ.get("JAX_COORDINATOR_ADDRESS"):
            raise SettingsError(
                "--distribution_strategy=multi_worker_mirrored on JAX needs TF_CONFIG (as on "
                "TensorFlow) or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID "
                "(docs/backends.md#several-devices-several-machines-tpus)")
        jax.distributed.initialize()
        return
    try:
        config = json.loads(config)
        workers = list(config["cluster"].get("chief", [])) + list(config["cluster"]["worker"])
        task = config["task"]
        index = int(task["index"]) + (len(config["cluster"].get("chief", []))
                                      if task["type"] == "worker" else 0)
    except (ValueError, KeyError, TypeError) as e:
        raise SettingsError(f"TF_CONFIG: not a cluster with workers and a task ({e}); e.g. "
                            + json.dumps({"cluster": {"worker": ["host1:12345", "host2:12345"]},
                                          "task": {"type": "worker", "index": 0}})) from None
    jax.distributed.initialize(coordinator_address=workers[0], num_processes=len(workers),
                               process_id=index)
