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


# Each installed console script (setup.py's entry points) and the module it runs.
CONSOLE_SCRIPTS = {
    **{name: f"bert_tf2.{name}" for name in (
        "run_pretraining", "run_classifier", "run_squad", "run_ner", "run_multiple_choice",
        "extract_features", "batch_predict", "run_search", "export_litert")},
    "bert-convert": "bert_tf2.modeling.convert",
    "bert-create-pretraining-data": "bert_tf2.data_gen.pretraining.create_pretraining_data",
    "bert-pretraining-data-beam": "bert_tf2.data_gen.pretraining.beam_pipeline",
    "bert-extract-features-beam": "bert_tf2.tasks.feature_extraction.beam_pipeline",
    "bert-learn-vocab": "bert_tf2.data_gen.learn_vocab",
    "bert-extend-vocab": "bert_tf2.data_gen.extend_vocab",
    "bert-serve": "bert_tf2.serve"}


def listed_flags(output: str) -> set:
    return {line.split(":")[0].strip().lstrip("-").removeprefix("[no]")
            for line in output.splitlines() if line.startswith("  --")}


# One runner and one tool in make test (one code path: process.errors.run_main); every other
# console script in make test-all.
@pytest.mark.parametrize("script", [
    script if script in ("run_classifier", "bert-serve") else pytest.param(
        script, marks=pytest.mark.slow) for script in sorted(CONSOLE_SCRIPTS)])
def test_helpshort_of_a_console_script_lists_its_flags(script):
    """`bin/run_classifier --helpshort` (the script pip installs, run as the shell runs it) lists
    the flags that `python -m bert_tf2.run_classifier --helpshort` lists, the runner's own and
    the shared ones (absl lists those of `sys.argv[0]`'s module: none, for a console script)."""
    installed = os.path.join(os.path.dirname(sys.executable), script)
    if not os.path.exists(installed):
        pytest.skip(f"{installed} is not installed (make test installs the package with pip -e)")
    as_installed = warm_python.run(
        [sys.executable, "-c", "import runpy, sys; sys.argv[0] = sys.argv[1]; del sys.argv[1]; "
         "runpy.run_path(sys.argv[0], run_name='__main__')", installed, "--helpshort"],
        cwd=REPO, env=dict(os.environ), timeout=120, warm=True)
    as_module = run(["-m", CONSOLE_SCRIPTS[script], "--helpshort"])
    # absl's --helpshort ends with status 1
    assert as_installed.returncode == as_module.returncode == 1, as_installed.stderr[-2000:]
    flags = listed_flags(as_installed.stdout)
    assert flags and flags == listed_flags(as_module.stdout), as_installed.stdout[-3000:]
    if script.startswith("run_") and script != "run_search":
        assert {"output_dir", "init_checkpoint"} <= flags  # runner_flags' shared ones
