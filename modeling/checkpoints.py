"""Checkpoint I/O: Google TF1, Hugging Face safetensors and Keras files, in and out, strictly.

Every source is first seen as a set of tensors under their TF1 names (`checkpoint_names`), then one
routine restores them: a model variable the checkpoint lacks, a checkpoint variable of the encoder
the model has no place for, or a shape that differs is an error naming the variable and both shapes.
Two things are allowed and listed in the log, never silent:
- head variables in the checkpoint that the model does not have (a pretraining checkpoint's
  `cls/...` heads when fine-tuning), reported as `unused`;
- model variables absent from the checkpoint that the caller allows explicitly
  (`allow_new_heads=True` for heads fine-tuning adds on purpose, or glob patterns in
  `allow_missing`), reported as `initialised`.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import shutil
from typing import Callable, Iterable

import numpy as np

from bert_tf2.modeling import checkpoint_names as names
from bert_tf2.modeling.config import BertConfig
from bert_tf2.process import atomic_files
from bert_tf2.process.errors import UserError

logger = logging.getLogger(__name__)

TF1_CONFIG = "bert_config.json"
TF1_PREFIX = "bert_model.ckpt"
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
KERAS_FILE = "model.keras"
VOCAB = "vocab.txt"


class CheckpointError(UserError):
    """A checkpoint that does not fit the model; the message names the offending variables (the
    first few, and how many there are) and config fields left to their defaults."""


@dataclasses.dataclass
class LoadReport:
    """What a load did: variables restored, left initialised on purpose, and checkpoint leftovers."""

    source: str
    loaded: list[str]
    initialised: list[str]
    unused: list[str]

    def log(self) -> None:
        logger.info("restored %d variables from %s", len(self.loaded), self.source)
        if self.initialised:
            logger.warning("not in %s, left initialised (allowed): %s", self.source,
                           ", ".join(self.initialised))
        if self.unused:
            logger.info("in %s but not used by this model: %s", self.source,
                        ", ".join(self.unused))


@dataclasses.dataclass
class TensorSource:
    """Tensors under TF1 names: their shapes, and a reader that fetches one as a NumPy array."""

    description: str
    shapes: dict[str, tuple[int, ...]]
    read: Callable[[str], np.ndarray]


# ------------------------------------------------------------------------------------ restore
def restore(model, source: TensorSource, allow_new_heads: bool = False,
            allow_missing: Iterable[str] = ()) -> LoadReport:
    """Assign every variable of `model` from `source`, strictly (see the module docstring)."""
    expected = names.tf1_variable_map(model)
    patterns = list(allow_missing)

    def may_be_missing(name):
        return (allow_new_heads and names.is_head(name)) or any(
            fnmatch.fnmatchcase(name, p) for p in patterns)

    errors = []
    missing = [n for n in expected if n not in source.shapes]
    for n in missing:
        if not may_be_missing(n):
            errors.append(f"{n}: the model needs it (shape {tuple(expected[n].shape)}) but the "
                          "checkpoint does not have it")
    unexpected = sorted(n for n in source.shapes if n not in expected)
    for n in unexpected:
        if not names.is_head(n):
            errors.append(f"{n}: in the checkpoint (shape {tuple(source.shapes[n])}) but the "
                          "model has no such variable")
    for n, var in expected.items():
        if n in source.shapes and tuple(source.shapes[n]) != tuple(var.shape):
            errors.append(f"{n}: checkpoint shape {tuple(source.shapes[n])} != model shape "
                          f"{tuple(var.shape)}")
    if errors:
        hint = ("" if allow_new_heads or not any(names.is_head(n) for n in missing) else
                " (heads that fine-tuning adds on purpose are allowed with allow_new_heads=True)")
        unset = _unset_config_keys(model)
        cause = ""
        rows = _vocab_rows(expected, source)
        if rows is not None:  # the likely cause first, and a few variables as evidence
            config = _config_of(model)
            cause = (f": its word embeddings have {rows[0]} rows but "
                     f"{getattr(config, 'source', '') or 'the bert config'} says vocab_size="
                     f"{rows[1]}; use the checkpoint's own bert_config.json (vocab_size "
                     f"{rows[0]})")
        elif unset:
            cause = (f": the bert config does not set {', '.join(unset)}, so the original's "
                     f"defaults were used; use the checkpoint's own bert_config.json")
        shown = errors[:2 if unset else MAX_LISTED]
        if len(errors) > len(shown):
            shown.append(f"... and {len(errors) - len(shown)} more")
        raise CheckpointError(f"{source.description} does not fit {model.name}{cause} "
                              f"({len(errors)} variable(s)): " + "; ".join(shown) + hint)
    loaded = [n for n in expected if n in source.shapes]
    for n in loaded:
        expected[n].assign(source.read(n).astype(np.float32, copy=False))
    report = LoadReport(source.description, loaded, missing,
                        [n for n in unexpected if names.is_head(n)])
    report.log()
    return report


MAX_LISTED = 8  # mismatched variables named in the message; the rest are counted


def _config_of(model):
    return getattr(model, "config", None) or getattr(getattr(model, "encoder", None), "config",
                                                     None)


def _unset_config_keys(model) -> tuple:
    """The shape fields the model's bert config file left to their defaults."""
    return tuple(getattr(_config_of(model), "unset", ()))


def _vocab_rows(expected: dict, source) -> tuple | None:
    """(checkpoint rows, model rows) of the word embeddings when only their count differs."""
    name = "bert/embeddings/word_embeddings"
    if name not in expected or name not in source.shapes:
        return None
    theirs, ours = tuple(source.shapes[name]), tuple(expected[name].shape)
    if len(theirs) == len(ours) == 2 and theirs[1] == ours[1] and theirs[0] != ours[0]:
        return theirs[0], ours[0]
    return None


def _in_memory_source(description: str, tensors: dict) -> TensorSource:
    return TensorSource(description, {n: tuple(v.shape) for n, v in tensors.items()},
                        tensors.__getitem__)


def resolve_file(path: str | os.PathLike, default_name: str, what: str) -> str:
    """`path` itself, or `default_name` inside it when it is a folder; it must exist."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, default_name)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no {what}")
    return path


# ------------------------------------------------------------------------------------ TF1
def _tensorflow_available() -> bool:
    """Whether this process reads TF1 checkpoints with TensorFlow (its backend is TensorFlow)."""
    from bert_tf2.process import environment

    return environment.uses_tensorflow()


def resolve_tf1_prefix(path: str | os.PathLike) -> str:
    """`path` may be a checkpoint prefix (`.../bert_model.ckpt`) or a folder holding one."""
    path = os.fspath(path)
    if os.path.exists(path + ".index"):
        return path
    folder, name = os.path.split(path)
    if name.startswith("model.ckpt-") and os.path.exists(os.path.join(folder, name[6:] + ".index")):
        return os.path.join(folder, name[6:])  # a runner checkpoint of an earlier version: ckpt-N
    if os.path.isdir(path) and _tensorflow_available():
        import tensorflow as tf
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
    if os.path.isdir(path):
        indexes = sorted(f[:-len(".index")] for f in os.listdir(path) if f.endswith(".index"))
        if len(indexes) == 1:
            return os.path.join(path, indexes[0])
        if indexes:
            raise CheckpointError(f"{path}: several checkpoints ({', '.join(indexes)}); "
                                  "name one by its prefix")
    raise CheckpointError(f"{path}: no TF1 checkpoint (expected {path}.index, or a folder "
                          f"holding {TF1_PREFIX}.index)")


def tf1_source(path: str | os.PathLike) -> TensorSource:
    """A Google TF1 checkpoint, minus Adam slots and `global_step`."""
    prefix = resolve_tf1_prefix(path)
    if not _tensorflow_available():
        return _bundle_source(prefix)
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = {n: tuple(s) for n, s in reader.get_variable_to_shape_map().items()
                  if not names.is_ignored_tf1(n)}
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(f"{prefix}.index: not a readable TF1 checkpoint index "
                              f"({_first_line(e)}); copy the checkpoint again") from None

    def read(name: str) -> np.ndarray:
        try:
            return reader.get_tensor(name)
        except (tf.errors.OpError, IndexError, ValueError) as e:
            data = sorted(f for f in os.listdir(os.path.dirname(prefix) or ".")
                          if f.startswith(os.path.basename(prefix) + ".data-"))
            where = os.path.join(os.path.dirname(prefix), data[0]) if data else prefix + ".data-*"
            raise CheckpointError(f"{where}: cannot read {name} ({_first_line(e)}): the file is "
                                  f"truncated or damaged; copy the checkpoint again") from None

    return TensorSource(f"TF1 checkpoint {prefix}", shapes, read)


def keras_numpy(variable) -> np.ndarray:
    """A Keras variable's value as NumPy, on any backend."""
    import keras

    return keras.ops.convert_to_numpy(variable.value)


def _bundle_source(prefix: str) -> TensorSource:
    """A TF1 checkpoint read without TensorFlow (`modeling.tensor_bundle`)."""
    from bert_tf2.modeling.tensor_bundle import TensorBundle, TensorBundleError

    try:
        bundle = TensorBundle(prefix)
    except TensorBundleError as e:
        raise CheckpointError(str(e)) from None

    def read(name: str) -> np.ndarray:
        try:
            return bundle.read(name)
        except TensorBundleError as e:
            raise CheckpointError(str(e)) from None

    shapes = {n: s for n, s in bundle.shapes().items() if not names.is_ignored_tf1(n)}
    return TensorSource(f"TF1 checkpoint {prefix}", shapes, read)


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def save_tf1_checkpoint(model, prefix: str | os.PathLike, global_step: int = 0) -> str:
    """Write `model` as a TF1 name-based checkpoint (`prefix.index`, `prefix.data-00000-of-00001`)
    that the original code restores; files appear under their final names only when complete.
    Without TensorFlow, `modeling.tensor_bundle` writes the same format."""
    prefix = os.fspath(prefix)
    tmp = f"{prefix}.tmp{os.getpid()}"
    variables = names.tf1_variable_map(model)
    if not _tensorflow_available():
        from bert_tf2.modeling import tensor_bundle

        tensors = {n: np.asarray(keras_numpy(v), np.float32) for n, v in variables.items()}
        tensors["global_step"] = np.array(global_step, np.int64)
        tensor_bundle.write(tmp, tensors)
        for suffix in (".data-00000-of-00001", ".index"):
            os.replace(tmp + suffix, prefix + suffix)
        return prefix
    import tensorflow as tf

    tensor_names = list(variables) + ["global_step"]
    tensors = [tf.convert_to_tensor(np.asarray(v.numpy(), np.float32))
               for v in variables.values()]
    tensors.append(tf.constant(global_step, tf.int64))
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=tensor_names,
                      shape_and_slices=[""] * len(tensor_names), tensors=tensors)
    for suffix in (".data-00000-of-00001", ".index"):  # index last: it marks a whole checkpoint
        os.replace(tmp + suffix, prefix + suffix)
    return prefix


# ------------------------------------------------------------------------------------ Hugging Face
def hf_source(path: str | os.PathLike) -> TensorSource:
    """A Hugging Face `model.safetensors` (or a folder holding one), any `bert.` prefix stripped,
    mapped to TF1 names with dense kernels transposed back to [in, out]."""
    from safetensors.numpy import load_file

    path = resolve_file(path, HF_WEIGHTS, "Hugging Face weights file")
    try:
        state = load_file(path)
    except Exception as e:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    tensors = {}
    for raw_name, value in state.items():
        name = names.normalise_hf_name(raw_name)
        if names.is_ignored_hf(name):
            continue
        try:
            tf1, transpose = names.tf1_name_from_hf(name)
        except KeyError:
            tf1, transpose = raw_name, False  # reported as unexpected if it is in the encoder
        tensors[tf1] = value.T if transpose else value
    return _in_memory_source(f"Hugging Face weights {path}", tensors)


def save_hf_checkpoint(model, directory: str | os.PathLike) -> None:
    """Write `model.safetensors` (Hugging Face names, `bert.` prefix only for task models) and
    `config.json` into `directory`."""
    from safetensors.numpy import save_file

    from bert_tf2.modeling.encoder import BertEncoder

    model.config.require_bert_architecture(os.fspath(directory))
    os.makedirs(directory, exist_ok=True)
    prefixed = not isinstance(model, BertEncoder)
    state = {}
    for tf1, var in names.tf1_variable_map(model).items():
        hf, transpose = names.hf_name(tf1)
        value = np.asarray(var.numpy(), np.float32)
        state[names.hf_prefixed(tf1, hf) if prefixed else hf] = np.ascontiguousarray(
            value.T if transpose else value)
    with atomic_files.atomic_path(os.path.join(directory, HF_WEIGHTS)) as tmp:
        save_file(state, tmp, metadata={"format": "pt"})
    atomic_files.write_text(os.path.join(directory, HF_CONFIG),
                            json.dumps(model.config.to_hf_dict(), indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------------ Keras
def keras_source(path: str | os.PathLike) -> TensorSource:
    """The weights of a `.keras` file saved from one of this project's models."""
    import keras

    path = resolve_file(path, KERAS_FILE, "Keras model file")
    saved = keras.models.load_model(path)
    tensors = {n: v.numpy() for n, v in names.tf1_variable_map(saved).items()}
    return _in_memory_source(f"Keras model {path}", tensors)


# ------------------------------------------------------------------------------------ KerasHub
def keras_hub_source(path: str | os.PathLike) -> TensorSource:
    """A KerasHub preset folder (`modeling.keras_hub_preset`)."""
    from bert_tf2.modeling import keras_hub_preset

    return _in_memory_source(f"KerasHub preset {os.fspath(path)}",
                             keras_hub_preset.tensors(os.fspath(path)))


# ------------------------------------------------------------------------------------ any format
FORMATS = ("tf1", "hf", "keras", "keras_hub")


def detect_format(path: str | os.PathLike) -> str:
    """tf1, hf, keras or keras_hub, from the file name or the folder's contents."""
    from bert_tf2.modeling import keras_hub_preset

    path = os.fspath(path)
    keras_hub_preset.check_preset(path)
    if keras_hub_preset.is_preset(path):  # before hf: both hold a config.json
        return "keras_hub"
    if path.endswith(".keras") or (os.path.isdir(path)
                                   and os.path.isfile(os.path.join(path, KERAS_FILE))):
        return "keras"
    if path.endswith(".safetensors") or (os.path.isdir(path)
                                         and os.path.isfile(os.path.join(path, HF_WEIGHTS))):
        return "hf"
    return "tf1"


def source_for(path: str | os.PathLike, fmt: str | None = None) -> TensorSource:
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown checkpoint format {fmt!r}; one of {', '.join(FORMATS)}")
    return {"tf1": tf1_source, "hf": hf_source, "keras": keras_source,
            "keras_hub": keras_hub_source}[fmt](path)


def load_checkpoint(model, path: str | os.PathLike, fmt: str | None = None,
                    allow_new_heads: bool = False, allow_missing: Iterable[str] = ()) -> LoadReport:
    """Restore `model` from a checkpoint in any supported format (see `restore`)."""
    return restore(model, source_for(path, fmt), allow_new_heads, allow_missing)


def training_checkpoint_prefix(path: str | os.PathLike) -> str | None:
    """The prefix of a checkpoint written by `training.Trainer` (object-based, not TF1 names)."""
    try:
        prefix = resolve_tf1_prefix(path)
    except CheckpointError:
        return None
    if not _tensorflow_available():
        from bert_tf2.modeling.tensor_bundle import TensorBundle, TensorBundleError

        try:
            entries = TensorBundle(prefix).entries
        except TensorBundleError as e:
            raise CheckpointError(str(e)) from None
        return prefix if "_CHECKPOINTABLE_OBJECT_GRAPH" in entries else None
    import tensorflow as tf

    try:
        names = {name for name, _ in tf.train.list_variables(prefix)}
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(f"{prefix}.index: not a readable checkpoint index "
                              f"({_first_line(e)}); copy the checkpoint again") from None
    return prefix if "_CHECKPOINTABLE_OBJECT_GRAPH" in names else None


STEP_VARIABLES = ("global_step", "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
                  "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE")


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The training step a TF1 checkpoint (`global_step`) or a runner's checkpoint (the
    optimiser's iterations) was saved at; None for other formats or when it holds none."""
    variables = variable_file(path)
    if variables is not None:
        from bert_tf2.modeling import variable_files

        return variable_files.step_of(variables)
    if not _tensorflow_available():
        from bert_tf2.modeling.tensor_bundle import TensorBundle, TensorBundleError

        try:
            bundle = TensorBundle(resolve_tf1_prefix(path))
            name = next((n for n in STEP_VARIABLES if n in bundle.entries), None)
            return None if name is None else int(bundle.read(name))
        except (CheckpointError, TensorBundleError):
            return None
    import tensorflow as tf

    try:
        prefix = resolve_tf1_prefix(path)
        reader = tf.train.load_checkpoint(prefix)
        names = reader.get_variable_to_shape_map()
    except (CheckpointError, tf.errors.OpError, ValueError):
        return None
    for name in STEP_VARIABLES:
        if name in names:
            return int(reader.get_tensor(name))
    return None


def load_initial_weights(model, path: str | os.PathLike, allow_new_heads: bool = False):
    """`--init_checkpoint` of the runners: any format `load_checkpoint` reads, or a checkpoint a
    runner wrote (phase 2 of pretraining continuing phase 1, fine-tuning from a pretraining run):
    only model weights are taken from the latter, never the optimiser's state. A runner checkpoint
    of another kind of model gives its encoder; the head then starts fresh, which needs
    `allow_new_heads`. Returns the `LoadReport`."""
    variables = variable_file(path)
    if variables is not None:
        return _load_variable_file(model, variables, allow_new_heads)
    prefix = training_checkpoint_prefix(path)
    if prefix is not None and not _tensorflow_available():
        raise CheckpointError(f"{prefix}: a checkpoint of a TensorFlow run; load it where "
                              f"TensorFlow is installed, or start from the run's best/ or the "
                              f"TF1 checkpoint its pretraining exported (tf1/)")
    if prefix is None:
        return load_checkpoint(model, path, allow_new_heads=allow_new_heads)
    import tensorflow as tf

    encoder = getattr(model, "encoder", model)  # a bare encoder takes a run's encoder
    head = [v.path for v in model.weights if not any(v is w for w in encoder.weights)]
    try:
        tf.train.Checkpoint(model=model).read(prefix).expect_partial() \
            .assert_existing_objects_matched()
        logger.info("restored the model weights from training checkpoint %s", prefix)
        return LoadReport(prefix, [v.path for v in model.weights], [], [])
    except tf.errors.OpError as e:
        raise CheckpointError(f"{prefix}: cannot read the training checkpoint "
                              f"({_first_line(e)}): a file is truncated or damaged; copy it "
                              f"again") from None
    except (AssertionError, ValueError) as e:
        if not allow_new_heads:
            raise CheckpointError(
                f"{prefix}: a training checkpoint of a different model ({str(e)[:300]}...)") \
                from None
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder)).read(prefix)
    try:
        status.expect_partial().assert_existing_objects_matched()
    except AssertionError as e:
        raise CheckpointError(f"{prefix}: its encoder does not fit this model ({str(e)[:300]}"
                              f"...)") from None
    report = LoadReport(prefix, [v.path for v in encoder.weights], head, [])
    report.log()
    return report


def variable_file(path: str | os.PathLike) -> str | None:
    """The variables file (`modeling.variable_files`) a runner on JAX wrote at `path`: a training
    checkpoint named as the original names them (`OUTPUT_DIR/model.ckpt-N`), the file itself, or
    a `best/` folder; None for anything else."""
    from bert_tf2.modeling import variable_files

    path = os.fspath(path)
    for candidate in (path, path + variable_files.SUFFIX,
                      os.path.join(path, "weights" + variable_files.SUFFIX)):
        if os.path.isfile(candidate) and variable_files.is_variable_file(candidate):
            return candidate
    return None


def _load_variable_file(model, path: str, allow_new_heads: bool) -> LoadReport:
    """A JAX run's weights: the whole model when it is the same model, else (`allow_new_heads`)
    its encoder, the head left fresh."""
    from bert_tf2.modeling import variable_files

    try:
        variable_files.load(path, {"model": model.weights})
        logger.info("restored the model weights from training checkpoint %s", path)
        return LoadReport(path, [v.path for v in model.weights], [], [])
    except variable_files.VariableFileError as e:
        if not allow_new_heads:
            raise CheckpointError(f"{path}: a checkpoint of a different model ({e})") from None
    encoder = getattr(model, "encoder", model)
    assigned = variable_files.load_matching(path, encoder.weights)
    missing = [v.path for v in encoder.weights if v.path not in assigned]
    if missing:
        raise CheckpointError(f"{path}: its encoder does not fit this model (no "
                              f"{', '.join(missing[:3])})")
    encoder_ids = {id(v) for v in encoder.weights}
    report = LoadReport(path, assigned, [v.path for v in model.weights
                                         if id(v) not in encoder_ids], [])
    report.log()
    return report


def read_config(path: str | os.PathLike, fmt: str | None = None) -> BertConfig:
    """The `BertConfig` stored beside a TF1 or Hugging Face checkpoint (or inside a .keras file or
    a KerasHub preset)."""
    fmt = fmt or detect_format(path)
    path = os.fspath(path)
    if fmt == "keras_hub":
        from bert_tf2.modeling import keras_hub_preset

        return keras_hub_preset.read_config(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if fmt in ("tf1", "hf"):
        config_path = os.path.join(folder, TF1_CONFIG if fmt == "tf1" else HF_CONFIG)
        if not os.path.isfile(config_path):
            raise CheckpointError(f"{path}: no {os.path.basename(config_path)} beside the "
                                  f"{fmt} checkpoint (looked for {config_path})")
    if fmt == "tf1":
        return BertConfig.from_json_file(config_path)
    if fmt == "hf":
        with open(config_path, encoding="utf-8") as f:
            values = json.load(f)
        try:
            config = BertConfig.from_hf_dict(values)
        except ValueError as e:
            raise type(e)(f"{config_path}: {e}") from None
        config.source = config_path
        return config
    import keras
    return keras.models.load_model(resolve_file(path, KERAS_FILE, "Keras model file")).config


def vocab_beside(path: str | os.PathLike) -> str | None:
    """The vocabulary that came with a checkpoint: `vocab.txt` in its folder, or a KerasHub
    preset's `assets/tokenizer/vocabulary.txt`; None when there is none."""
    from bert_tf2.modeling import keras_hub_preset

    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if keras_hub_preset.is_preset(folder):
        return keras_hub_preset.vocab_file(folder)
    candidate = os.path.join(folder, VOCAB)
    return candidate if os.path.isfile(candidate) else None


def copy_vocab(src: str, dst_folder: str) -> bool:
    """Carry `vocab.txt` (a file, or the one that came with a checkpoint folder) along with
    weights, when there is one."""
    if os.path.isdir(src):
        src = vocab_beside(src) or os.path.join(src, VOCAB)
    if os.path.isfile(src):
        shutil.copyfile(src, os.path.join(dst_folder, VOCAB))
        return True
    return False
