"""The installed library: one import package, `bert_tf2`, that changes nothing when imported.

- A wheel built from this checkout, installed into a fresh environment, adds `bert_tf2` and the
  console scripts and nothing else that could clash with another distribution.
- Importing every library module leaves `os.environ`, `sys.meta_path` and the root logger as they
  were: the programs' entry points set the process up (`process.environment.configure`).
"""
import ast
import json
import pathlib
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration

PACKAGE = "bert_tf2"
# Entry points: they define flags when imported and set the process up when run.
ENTRY_POINTS = {"serve", "runner_flags", "create_pretraining_data", "batch_predict",
                "extract_features", "export_litert"}


def library_modules() -> list:
    """Every module of the package but the entry points at the repository's root."""
    modules = []
    for path in sorted(REPO.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[0] in {"tests", "bench", "examples", "build", "setup"} or parts[0].startswith(".") \
                or any(p.endswith(".egg-info") for p in parts):
            continue
        if len(parts) == 1 and (parts[0] in ENTRY_POINTS or parts[0].startswith("run_")):
            continue
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        modules.append(".".join((PACKAGE, *parts)))
    return modules


def third_party_tops(modules: list) -> list:
    """The top-level packages outside the project that `modules` import, at any depth."""
    tops = set()
    for module in modules:
        relative = module.split(".")[1:]
        path = REPO.joinpath(*relative)
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                tops.add(node.module.split(".")[0])
    return sorted(tops - {PACKAGE, "__future__"})


# Imports the third parties first (what they do on import is theirs), then takes the state,
# imports every module of the package and reports what changed.
_PROBE = """
import importlib, json, logging, os, sys
modules, third_parties = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in third_parties:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
root = logging.getLogger()
before = (dict(os.environ), list(sys.meta_path), list(root.handlers), root.level)
for name in modules:
    importlib.import_module(name)
after = (dict(os.environ), list(sys.meta_path), list(root.handlers), root.level)
print(json.dumps({
    "environ": sorted(k for k in set(before[0]) | set(after[0])
                      if before[0].get(k) != after[0].get(k)),
    "meta_path": [repr(f) for f in after[1] if f not in before[1]],
    "handlers": [repr(h) for h in after[2] if h not in before[2]],
    "level": [before[3], after[3]],
    "loaded": len(modules)}))
"""


def test_importing_the_library_changes_nothing_in_the_process():
    modules = library_modules()
    assert {f"{PACKAGE}.modeling.encoder", f"{PACKAGE}.engine.training",
            f"{PACKAGE}.model_server.app", f"{PACKAGE}.process.environment"} <= set(modules)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(pathlib.Path.home())}  # no KERAS_BACKEND
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(modules),
                             json.dumps(third_party_tops(modules))],
                            capture_output=True, text=True, cwd="/", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    changed = json.loads(result.stdout.strip().splitlines()[-1])
    assert changed == {"environ": [], "meta_path": [], "handlers": [],
                       "level": [changed["level"][0]] * 2, "loaded": len(modules)}


def test_the_entry_points_set_the_process_up():
    """The counterpart: a program's start (`run_main`) sets Keras's backend and TensorFlow's
    quiet start-up, once, keeping what the user set."""
    script = ("import os, sys\n"
              "from bert_tf2.process import environment\n"
              "environment.configure(); environment.configure()\n"
              "hooks = [f for f in sys.meta_path if type(f).__name__ == '_QuietTensorFlowImport']\n"
              "print(os.environ['KERAS_BACKEND'], os.environ['TF_ENABLE_ONEDNN_OPTS'], "
              "os.environ['TF_CPP_MIN_LOG_LEVEL'], len(hooks))\n")
    env = {"PATH": "/usr/bin:/bin", "TF_ENABLE_ONEDNN_OPTS": "0"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd="/", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["tensorflow", "0", "2", "1"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """A wheel of this checkout, built without fetching anything."""
    folder = tmp_path_factory.mktemp("wheel")
    # A copy of the tracked files only, so that a local build/ or .venv cannot leak into it.
    source = folder / "source"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(folder / "dist"), str(source)],
                   check=True, capture_output=True)
    (built,) = (folder / "dist").glob("*.whl")
    return built


def test_the_wheel_holds_one_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        names = set(archive.namelist())
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt")))
    assert tops == {PACKAGE, wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                    + ".dist-info"}
    # The runners, the library folders and the original's command-line shims are in it; the
    # tests, benches, examples and setup.py are not.
    for name in ("run_classifier.py", "run_squad.py", "run_ner.py", "run_pretraining.py",
                 "runner_flags.py", "serve.py", "create_pretraining_data.py", "__init__.py",
                 "modeling/encoder.py", "data_gen/tokenization.py", "engine/training.py",
                 "tasks/squad/task.py", "process/errors.py", "model_server/app.py"):
        assert f"{PACKAGE}/{name}" in names, name
    assert not [n for n in names if n.startswith(f"{PACKAGE}/tests/")
                or n.startswith(f"{PACKAGE}/bench/") or n == f"{PACKAGE}/setup.py"]
    assert f"run_classifier = {PACKAGE}.run_classifier:console_main" in entry_points.decode()


def test_a_fresh_environment_gains_the_package_and_the_console_scripts(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = pathlib.Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    before_lib, before_bin = set(p.name for p in purelib.iterdir()), set(
        p.name for p in (venv / "bin").iterdir())
    # The fresh environment's own pip (this one's, given --prefix, would uninstall this
    # environment's copy first), without dependencies: only the wheel's own files.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-compile", str(wheel)], check=True, capture_output=True)
    added = {p.name for p in purelib.iterdir()} - before_lib
    assert {n for n in added if not n.endswith(".dist-info")} == {PACKAGE}
    scripts = {p.name for p in (venv / "bin").iterdir()} - before_bin
    assert {"run_classifier", "run_squad", "run_ner", "run_pretraining", "run_multiple_choice",
            "extract_features", "batch_predict", "run_search", "export_litert", "bert-serve",
            "bert-convert", "bert-create-pretraining-data"} <= scripts
    assert all(s.startswith(("run_", "bert-")) or s in {"extract_features", "batch_predict",
                                                        "export_litert"} for s in scripts)
    # The installed package imports from there (its lowest floor needs no dependency).
    probe = subprocess.run([str(python), "-c", f"import {PACKAGE}.process.atomic_files as m; "
                            "print(m.__file__)"], capture_output=True, text=True, cwd="/",
                           env={"PATH": "/usr/bin:/bin"})
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip().startswith(str(purelib / PACKAGE))
    # ... and this environment's own copy is untouched.
    assert sysconfig.get_paths()["purelib"] != str(purelib)
    assert subprocess.run([sys.executable, "-c", f"import {PACKAGE}.process.errors"],
                          cwd="/").returncode == 0
