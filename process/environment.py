"""Process settings for TensorFlow and Keras, in place before TensorFlow is first imported.

Importing this module changes nothing: `configure()` does, and only the programs' entry points call
it (`process.errors.run_main`, which every runner and command-line tool starts through), so that a
library imported by someone else's program leaves their environment, import system and logging as
they were. `configure()` is idempotent.

Keras runs on its TensorFlow backend. TensorFlow's start-up chatter on a machine without a GPU (CUDA
driver probing, `cuInit` failures, absl's pre-init banner) is written by C++ straight to file
descriptor 2 before any log level applies. So the first `import tensorflow`, whoever makes it, runs
with that descriptor captured (an import hook; nothing is imported here), together with device
discovery, which prints the `cuInit` failure; lines matching the known noise are dropped and
everything else is written back to stderr. Pure-Python code (the tokenizer, record writers) thus
never pays for importing TensorFlow. A user who sets TF_CPP_MIN_LOG_LEVEL sees TensorFlow's output
untouched (a value this module set, inherited by a child process, marks itself in BERT_QUIET_TF).
It also turns oneDNN's CPU kernels on (`TF_ENABLE_ONEDNN_OPTS=1`) unless the user set the variable.

Keras's backend is TensorFlow unless `KERAS_BACKEND` names another (`jax`, `torch`;
docs/backends.md); `backend()` says which, without importing Keras, so that the data code can
choose TensorFlow's readers or their Python twins before anything heavy is loaded.
"""
import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

BACKENDS = ("tensorflow", "jax", "torch")


class BackendError(ValueError):
    """`KERAS_BACKEND` names no backend Keras can load (one line; raised before Keras is)."""


def backend() -> str:
    """Keras's backend for this process: `tensorflow` (the default), `jax` or `torch`."""
    return os.environ.get("KERAS_BACKEND") or "tensorflow"


def uses_tensorflow() -> bool:
    """Whether this process runs on TensorFlow (else: no TensorFlow is needed, nor imported)."""
    return backend() == "tensorflow"

_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|Could not find cuda drivers|failed call to cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|computation placer already registered"
    r"|TF-TRT Warning|oneDNN custom operations are on|Attempting to register factory for plugin"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|cuda_executor.cc.*(could not|no NUMA)|Skipping registering GPU devices")


@contextlib.contextmanager
def _filtered_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode("utf-8", "replace").splitlines(True)
                    if line.strip() and not _NOISE.search(line)]
            if kept:
                sys.stderr.write("".join(kept))


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Wraps the loading of the `tensorflow` package in `_filtered_stderr`, once."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            with _filtered_stderr():
                load(module)
                module.config.list_physical_devices()  # device discovery prints cuInit errors

        spec.loader.exec_module = exec_module
        return spec


def configure() -> None:
    """A program's process settings, before Keras or TensorFlow is imported: Keras on TensorFlow
    unless `KERAS_BACKEND` names another, oneDNN's CPU kernels on, TensorFlow's quiet start-up.
    A user's own setting of any of these variables is kept; a `KERAS_BACKEND` Keras cannot load
    is a `BackendError`, before anything imports Keras."""
    given = os.environ.get("KERAS_BACKEND")
    if given is not None and given not in BACKENDS:
        raise BackendError(f"KERAS_BACKEND={given!r}: Keras's backend is one of "
                           f"{', '.join(BACKENDS)} (unset: tensorflow); the runners train on "
                           f"tensorflow and jax")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # oneDNN's CPU kernels: TensorFlow turns them on by itself only on some CPUs (Intel's, not
    # AMD's, where they made fine-tuning 1.9x faster). A user's own setting, 0 included, is kept.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    user_set_log_level = ("TF_CPP_MIN_LOG_LEVEL" in os.environ
                          and os.environ.get("BERT_QUIET_TF") != "1")
    if (not user_set_log_level and "tensorflow" not in sys.modules
            and not any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path)):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
        os.environ["BERT_QUIET_TF"] = "1"
        sys.meta_path.insert(0, _QuietTensorFlowImport())
