"""Start-up: pure-Python modules never load TensorFlow, and TensorFlow's CPU-machine noise is hidden."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What every program's start does (process.errors.run_main) before anything loads TensorFlow.
CONFIGURED = "from bert_tf2.process import environment; environment.configure(); "


def run_python(code, **env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TF_CPP_MIN_LOG_LEVEL", "BERT_QUIET_TF")}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


def test_tokenizer_import_does_not_load_tensorflow():
    result = run_python("import sys, bert_tf2.data_gen.tokenization, bert_tf2.process.atomic_files; "
                        "print('tensorflow' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_tensorflow_start_up_noise_is_filtered_but_real_errors_are_not():
    result = run_python(CONFIGURED + "import bert_tf2.modeling.encoder, sys, tensorflow as tf; "
                        "tf.reduce_sum(tf.ones(2)); print('real error', file=sys.stderr)")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "real error\n"


def test_a_user_log_level_shows_tensorflow_untouched():
    result = run_python(CONFIGURED + "import bert_tf2.modeling.encoder, os; "
                        "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])",
                        TF_CPP_MIN_LOG_LEVEL="0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
