"""The programs forked from the warm Python (tests/warm_python.py) behave as fresh interpreters:
the same output and exit status, their own process that signals reach, the caller's folder and
environment; what cannot be forked runs fresh."""
import os
import signal
import subprocess
import sys
import time

import pytest
import warm_python
from conftest import REPO


@pytest.fixture(autouse=True)
def warm(monkeypatch):
    """Forking is the default: these tests hold it to a fresh interpreter's behaviour."""
    monkeypatch.delenv(warm_python.WARM_VARIABLE, raising=False)


def fresh(args, **kwargs):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, **kwargs)


# A script and a module; a script with an output folder too in make test-all (each case starts
# a fresh interpreter: 4 s).
@pytest.mark.integration
@pytest.mark.parametrize("args", [
    ["run_classifier.py", "--task_name=nope"],
    pytest.param(["run_classifier.py", "--output_dir={tmp_path}", "--task_name=nope",
                  "--do_train"], marks=pytest.mark.slow),
    ["-m", "bert_tf2.modeling.convert", "--helpshort"]], ids=["script", "output_dir", "module"])
def test_a_forked_program_prints_and_exits_as_a_fresh_one(args, tmp_path):
    args = [arg.format(tmp_path=tmp_path) for arg in args]
    expected = fresh(args)
    forked = warm_python.run([sys.executable, *args], timeout=300)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        expected.returncode, expected.stdout, expected.stderr), args
    if args[0] == "-m":
        assert "--input" in expected.stdout  # absl's --helpshort, which exits with 1


@pytest.mark.integration
def test_a_forked_program_is_a_process_of_its_own(tmp_path):
    """Its own pid, folder and run-time environment, killed by SIGKILL like any child; the next
    one starts in a fraction of a fresh start (nothing is imported again)."""
    warm_python.run([sys.executable, "run_classifier.py", "--helpshort"])  # the server is up
    start = time.monotonic()
    quick = warm_python.run([sys.executable, "run_classifier.py", "--task_name=nope"])
    forked = time.monotonic() - start
    start = time.monotonic()
    slow = fresh(["run_classifier.py", "--task_name=nope"])
    assert quick.returncode == slow.returncode == 2
    assert forked < 0.5 * (time.monotonic() - start), forked  # on a loaded machine too
    (tmp_path / "bad.json").write_text("{\n")
    command = [sys.executable, str(REPO / "run_pretraining.py"), f"--input_file={REPO}/setup.py",
               "--output_dir=out", "--bert_config_file=bad.json", "--do_train"]
    process = warm_python.start(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                env={**os.environ, "BERT_TRACEBACK": "1"})
    assert process.pid != os.getpid() and os.path.exists(f"/proc/{process.pid}")
    assert process.wait(timeout=120) == 1
    stderr = process.stderr.read()
    assert "Traceback" in stderr and "bad.json: not valid JSON (line 2, column 1)" in stderr
    quiet = warm_python.run(command, cwd=tmp_path)
    assert quiet.stderr.strip().splitlines()[-1].startswith(
        "run_pretraining.py: error: bad.json: not valid JSON") and "Traceback" not in quiet.stderr



@pytest.mark.integration
def test_a_forked_program_is_frozen_and_killed_by_signals(shared_data, tiny_checkpoint,
                                                          tmp_path):
    from conftest import wait_until_stopped
    from reference_runs import two_shards_command

    from bert_tf2.process.fault_points import STOP_VARIABLE

    out = tmp_path / "out"
    process = warm_python.start(
        [sys.executable, *two_shards_command(shared_data, tiny_checkpoint, out)],
        stdout=subprocess.DEVNULL, env={**os.environ, STOP_VARIABLE: "records@1"})
    wait_until_stopped(process)
    assert process.poll() is None
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    assert not (out / "a.tfrecord").exists()


def test_one_server_serves_every_test_of_a_process():
    """What pytest sets per test (PYTEST_CURRENT_TEST) and the runs' own variables do not start
    servers of their own; a variable read at import time does."""
    base = warm_python._import_time(dict(os.environ))
    assert warm_python._import_time({**os.environ, "PYTEST_CURRENT_TEST": "t.py::other (call)",
                                     "BERT_TEST_KILL_AT": "features@1"}) == base
    assert warm_python._import_time({**os.environ, "KERAS_BACKEND": "jax"}) != base


MODULES = """
import json, os, sys
if sys.argv[1:] == ["fresh"]:
    import tensorflow, tensorflow_text  # noqa: F401, E401
print(json.dumps({"pid": os.getpid(), "parent": os.getppid(), "cwd": os.getcwd(),
                  "argv": sys.argv[1:], "imported": sorted(
                      {name.split(".")[0] for name in sys.modules if not name.startswith("_")}
                      - set(sys.stdlib_module_names))}))
"""


@pytest.mark.integration
def test_a_tensorflow_only_program_holds_what_a_fresh_tensorflow_import_does(tmp_path):
    """`tensorflow_only` (the scripts that load an export as a user's script does): a process of
    its own, forked from a Python that imported TensorFlow and tensorflow_text alone. It holds
    the packages a fresh interpreter that imported those two holds, and none of this project's
    or of what only this project imports (Keras Hub, numba); its arguments and folder are its
    own."""
    import json

    from conftest import tensorflow_only

    ours = {"bert_tf2", "keras_hub", "numba", "conftest"} | {
        path.name for path in REPO.iterdir() if (path / "__init__.py").is_file()}
    assert {"modeling", "engine", "tasks"} <= ours
    fresh_import = set(json.loads(fresh(["-c", MODULES, "fresh"]).stdout)["imported"])
    assert {"tensorflow", "tensorflow_text"} <= fresh_import and not ours & fresh_import
    first, second = (tensorflow_only([sys.executable, "-c", MODULES, "a", tmp_path],
                                     cwd=tmp_path) for _ in range(2))
    assert first.returncode == second.returncode == 0, first.stderr[-2000:]
    first, second = (json.loads(result.stdout) for result in (first, second))
    assert fresh_import <= set(first["imported"]), first
    assert not ours & set(first["imported"]), first  # (tests/warm_python.py, the server, is)
    assert first["argv"] == ["a", str(tmp_path)] and first["cwd"] == str(tmp_path)
    # Forks of one server, not children of this process: the import is paid once.
    assert first["pid"] != second["pid"] and os.getpid() not in (first["parent"],
                                                                  second["parent"])
