"""Process settings that must be in place before TensorFlow is first imported.

Keras runs on its TensorFlow backend. TensorFlow's start-up chatter on a machine without a GPU (CUDA
driver probing, `cuInit` failures, absl's pre-init banner) is written by C++ straight to file
descriptor 2 before any log level applies, so TensorFlow is imported, and its devices discovered,
with that descriptor captured; lines matching the known noise are dropped and everything else is
written back to stderr. A user who sets TF_CPP_MIN_LOG_LEVEL sees TensorFlow's output untouched
(a value this module set, inherited by a child process, marks itself in BERT_QUIET_TF).
"""
import os
import re
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|Could not find cuda drivers|failed call to cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|computation placer already registered"
    r"|TF-TRT Warning|oneDNN custom operations are on|Attempting to register factory for plugin"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|cuda_executor.cc.*(could not|no NUMA)|Skipping registering GPU devices")


def _import_tensorflow_quietly() -> None:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["BERT_QUIET_TF"] = "1"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf
            tf.config.list_physical_devices()  # device discovery prints the cuInit failure
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        kept = [line for line in captured.read().decode("utf-8", "replace").splitlines(True)
                if line.strip() and not _NOISE.search(line)]
    if kept:
        sys.stderr.write("".join(kept))


_user_set_log_level = ("TF_CPP_MIN_LOG_LEVEL" in os.environ
                       and os.environ.get("BERT_QUIET_TF") != "1")
if not _user_set_log_level and "tensorflow" not in sys.modules:
    _import_tensorflow_quietly()
