"""A model's variables (and an optimiser's, and the random state) in one safetensors file that every
Keras backend reads: the runners' checkpoints off TensorFlow.

TensorFlow's runners checkpoint with `tf.train.Checkpoint`; JAX (and PyTorch) have no such format,
and TensorFlow may not be installed. So there a checkpoint is a safetensors file of NumPy arrays
under `GROUP/NNNNN/PATH` keys (the group: `model`, `optimizer`, `random`; the variable's place in
its list; its Keras path), with `{"format": FORMAT, "step": N}` in its metadata (as JSON under one key, so that the same
state always gives the same bytes). Restoring is
strict as `modeling.checkpoints` is: the same variables in the same order, with the same paths
and shapes, or an error naming the first that differs. Safetensors, not Keras's `.weights.h5`:
it holds the optimiser's state and the dropout generators' state as plain arrays beside the
weights, reads lazily, and is already how Hugging Face weights come in.
"""
from __future__ import annotations

import json
import os

import numpy as np

from bert_tf2.process.errors import UserError

FORMAT = "bert-keras-variables-1"
METADATA_KEY = "bert"
SUFFIX = ".safetensors"


class VariableFileError(UserError):
    """A variables file that is damaged or does not fit the model."""


def _host(value) -> np.ndarray:
    """A backend array as NumPy (one process's copy of a replicated JAX array)."""
    if getattr(value, "is_fully_addressable", True) is False:
        value = value.addressable_data(0)
    import keras

    return np.asarray(keras.ops.convert_to_numpy(value))


def save(path: str, groups: dict, step: int) -> None:
    """Write `{group: [variables]}` to `path` (the caller makes it appear atomically)."""
    write(path, host_arrays(groups), step)


def host_arrays(groups: dict) -> dict:
    """`{key: NumPy copy}` of `{group: [variables]}`: what `write` stores, taken off the devices
    (a copy, so that the next update may reuse or donate the variables' buffers)."""
    return {key: _own_copy(variable.value) for key, variable in _keyed(groups)}


def _keyed(groups: dict):
    """`(GROUP/NNNNN/PATH, variable)` for each variable of `{group: [variables]}`."""
    for group, variables in groups.items():
        for i, variable in enumerate(variables):
            yield f"{group}/{i:05d}/{variable.path}", variable


def _metadata(step: int) -> dict:
    # One metadata key: safetensors writes several in an order that changes from run to run.
    return {METADATA_KEY: json.dumps({"format": FORMAT, "step": int(step)}, sort_keys=True)}


def _own_copy(value) -> np.ndarray:
    """A C-ordered NumPy array of `value` that owns its memory: copied once (Keras's
    `convert_to_numpy` copies already; a view of a device buffer is copied again)."""
    array = _host(value)
    if array.flags.c_contiguous and array.flags.owndata:
        return array
    return np.array(array, order="C")


def write(path: str, arrays: dict, step: int) -> None:
    """Write `host_arrays`' result to `path` (any thread; the caller makes it appear atomically)."""
    from safetensors.numpy import save_file

    save_file(arrays, path, metadata=_metadata(step))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)  # safetensors writes 0600; files here follow the umask


# Several processes write one file, each its share of the arrays (`Layout`): the same safetensors
# file, laid out by this module rather than by safetensors' writer, so that every process knows
# where each array's bytes go without being sent them.
_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
           "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
           "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL"}


class Layout:
    """Where each array of `{group: [variables]}` lies in the checkpoint file of `step`, and
    which of `processes` writes it: arrays in key order, contiguous after the header; shares
    balanced by bytes (the largest arrays first, each to the process with the fewest bytes so
    far), the same in every process."""

    def __init__(self, groups: dict, step: int, processes: int):
        variables = dict(_keyed(groups))
        self.variables = {}  # key -> variable
        self.spans = {}  # key -> (begin, end) of its bytes after the header
        header = {"__metadata__": _metadata(step)}
        offset = 0
        for key in sorted(variables):
            dtype, shape = _numpy_dtype(variables[key].dtype), tuple(variables[key].shape)
            size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            header[key] = {"dtype": _DTYPES[dtype.name], "shape": list(shape),
                           "data_offsets": [offset, offset + size]}
            self.variables[key], self.spans[key] = variables[key], (offset, offset + size)
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes
        self.header = len(text).to_bytes(8, "little") + text
        self.size = len(self.header) + offset
        load = [0] * processes
        self.shares = [[] for _ in range(processes)]
        sizes = {key: end - begin for key, (begin, end) in self.spans.items()}
        for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
            least = min(range(processes), key=lambda p: (load[p], p))
            self.shares[least].append(key)
            load[least] += sizes[key]

    def host_share(self, process: int) -> dict:
        """`{key: NumPy copy}` of the arrays `process` writes (copied off its devices)."""
        return {key: _own_copy(self.variables[key].value) for key in self.shares[process]}

    def create(self, path: str) -> None:
        """The file at its full size, its header written (one process, before any share)."""
        with open(path, "wb") as f:
            f.write(self.header)
            f.truncate(self.size)

    def write_share(self, path: str, arrays: dict) -> None:
        """Write `host_share`'s arrays into the file `create` made (any process, any thread)."""
        with open(path, "r+b") as f:
            for key, array in arrays.items():
                f.seek(len(self.header) + self.spans[key][0])
                f.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8))  # no copy
            f.flush()
            os.fsync(f.fileno())


def _numpy_dtype(dtype) -> np.dtype:
    import keras

    name = keras.backend.standardize_dtype(dtype)
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16: NumPy knows it through ml_dtypes (installed with JAX and TF)
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def is_variable_file(path: str) -> bool:
    """Whether `path` is a file this module wrote."""
    return read_metadata(path) is not None


def read_metadata(path: str) -> dict | None:
    from safetensors import safe_open

    if not os.path.isfile(path):
        return None
    try:
        with safe_open(path, "np") as f:
            metadata = json.loads((f.metadata() or {}).get(METADATA_KEY, "{}"))
    except Exception:  # not a safetensors file at all (safetensors raises its own types)
        return None
    return metadata if isinstance(metadata, dict) and metadata.get("format") == FORMAT else None


def step_of(path: str) -> int | None:
    metadata = read_metadata(path)
    return None if metadata is None else int(metadata["step"])


def load(path: str, groups: dict, partial: bool = False) -> dict:
    """Assign `{group: [variables]}` from `path`; with `partial`, groups absent from the file are
    left alone (and reported in the returned `{group: loaded?}`)."""
    from safetensors import safe_open

    try:
        with safe_open(path, "np") as f:
            keys = list(f.keys())
            loaded = {}
            for group, variables in groups.items():
                stored = sorted(k for k in keys if k.startswith(group + "/"))
                if not stored and partial:
                    loaded[group] = False
                    continue
                _check(path, group, stored, variables)
                for key, variable in zip(stored, variables):
                    variable.assign(f.get_tensor(key))
                loaded[group] = True
    except VariableFileError:
        raise
    except Exception as e:  # a truncated or damaged file
        raise VariableFileError(f"{path}: cannot read it ({str(e).splitlines()[0][:200]}): the "
                                f"file is truncated or damaged") from None
    return loaded


def _check(path: str, group: str, stored: list, variables: list) -> None:
    from safetensors import safe_open

    if len(stored) != len(variables):
        raise VariableFileError(f"{path}: {len(stored)} {group} variables, this model has "
                                f"{len(variables)}: a file of another model or run")
    with safe_open(path, "np") as f:
        for key, variable in zip(stored, variables):
            name = key.split("/", 2)[2]
            shape = tuple(f.get_slice(key).get_shape())
            if name != variable.path or shape != tuple(variable.shape):
                raise VariableFileError(
                    f"{path}: {group} variable {key.split('/')[1]} is {name} {shape}, this model "
                    f"has {variable.path} {tuple(variable.shape)}: a file of another model")


def load_matching(path: str, variables: list) -> list:
    """Assign each of `variables` whose path is in the file's `model` group (an encoder from a
    run of another task); returns the paths assigned."""
    from safetensors import safe_open

    with safe_open(path, "np") as f:
        by_path = {key.split("/", 2)[2]: key for key in f.keys() if key.startswith("model/")}
        assigned = []
        for variable in variables:
            key = by_path.get(variable.path)
            if key is None:
                continue
            value = f.get_tensor(key)
            if value.shape != tuple(variable.shape):
                raise VariableFileError(f"{path}: {variable.path} has shape {value.shape}, this "
                                        f"model's {tuple(variable.shape)}")
            variable.assign(value)
            assigned.append(variable.path)
    return assigned
