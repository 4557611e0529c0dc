"""Refused before anything starts, in one line: a `KERAS_BACKEND` Keras cannot load (checked
before Keras is imported, by every program's start, `process.errors.run_main`), and a model name
serve.py cannot serve under."""
import os
import sys

import pytest
import warm_python
from conftest import REPO

pytestmark = pytest.mark.integration

PROGRAMS = [["run_classifier.py"], ["run_squad.py"], ["run_ner.py"], ["run_pretraining.py"],
            ["run_multiple_choice.py"], ["run_search.py"], ["serve.py"], ["batch_predict.py"],
            ["extract_features.py"], ["export_litert.py"], ["create_pretraining_data.py"],
            ["-m", "bert_tf2.modeling.convert"], ["-m", "bert_tf2.data_gen.learn_vocab"]]


def run(args, **env):
    return warm_python.run([sys.executable, *args], cwd=REPO, env={**os.environ, **env},
                           timeout=120)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p[-1])
def test_a_keras_backend_keras_cannot_load_is_one_line(program):
    result = run([*program, "--help"], KERAS_BACKEND="nonsense")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert "error: KERAS_BACKEND='nonsense': Keras's backend is one of tensorflow, jax, torch" \
        in lines[0]


@pytest.mark.parametrize("name, words", [
    ("", "--model_name='': a model name is letters, digits"),
    ("a/b", "--model_name='a/b'"), ("m:predict", "--model_name='m:predict'")])
def test_serve_refuses_a_model_name_it_cannot_serve_under(tmp_path, name, words):
    result = run(["serve.py", f"--export_dir={tmp_path}", f"--model_name={name}"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"serve.py: error: {words}"
                                                  + result.stderr.split(words, 1)[1].strip()]


def test_serve_refuses_an_export_folder_name_that_is_no_model_name(tmp_path):
    export = tmp_path / "my export"
    export.mkdir()
    result = run(["serve.py", f"--export_dir={export}"])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "its folder's name 'my export' cannot be a model name" in result.stderr
    assert "--model_name" in result.stderr
