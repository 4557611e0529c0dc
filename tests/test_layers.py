"""The architecture as a test: imports only go down, tasks do not import each other, only the
command-line front doors read flags, and the math loads alone.

Floors, from the ground up (docs/architecture.md and the README draw them from `LAYERS`, and
`test_the_docs_draw_these_floors` holds them to it):
  1 process       errors, atomic files, output locks, fault points, flag ranges, TF start-up
  2 modeling      the math and checkpoint I/O
  3 data_gen      text to tensors
  4 engine        training: the loop, the drivers, export
  4 inference     answering raw texts with an export (beside the engine: it imports none of it)
  5 tasks         one folder per task
  5 search        searches over fine-tuning runs (beside the tasks: it knows none of them)
  6 model_server  serve.py's HTTP server, on tasks/runtimes.py (the map of tasks to runtimes)
  7 runners       run_*.py, runner_flags.py, serve.py and the root's other command lines
A module may import its own floor and the ones below it, never one above.
"""
import ast
import pathlib
import subprocess
import sys

import pytest
from conftest import REPO

LAYERS = {"process": 1, "modeling": 2, "data_gen": 3, "engine": 4, "inference": 4, "tasks": 5,
          "search": 5, "model_server": 6}
RUNNER_LAYER = 7
# Command-line front doors besides the runners: they define and read their own flags.
FRONT_DOORS = {"modeling/convert.py", "data_gen/learn_vocab.py", "data_gen/extend_vocab.py",
               "data_gen/pretraining/create_pretraining_data.py",
               "data_gen/pretraining/beam_pipeline.py", "data_gen/pretraining/flags.py",
               "process/errors.py",  # the front doors' one-line errors, flag errors included
               "process/flag_ranges.py",  # the front doors' range checks, registered on their flags
               "tasks/feature_extraction/beam_pipeline.py", "tasks/feature_extraction/flags.py"}


# The modules at the repository's root: the runners and the other command lines (floor 7).
ROOT_MODULES = {path.stem for path in REPO.glob("*.py")} - {"setup", "__init__"}


def project_modules():
    for path in sorted(REPO.glob("*.py")):
        if path.stem in ROOT_MODULES:
            yield path
    for package in LAYERS:
        yield from sorted((REPO / package).rglob("*.py"))


PACKAGE = "bert_tf2"


def project_part(module: str) -> str | None:
    """`bert_tf2.tasks.squad.files` -> `tasks.squad.files`; None outside the package."""
    prefix = PACKAGE + "."
    return module[len(prefix):] if module.startswith(prefix) else None


def layer_of(module: str) -> int | None:
    part = project_part(module)
    if part is None:
        return None  # the standard library and third parties
    top = part.split(".")[0]
    if top in LAYERS:
        return LAYERS[top]
    if top in ROOT_MODULES:
        return RUNNER_LAYER
    return None  # the standard library and third parties


def imported_modules(path: pathlib.Path):
    """(line, module) of every import in the file, at any depth (lazy imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def relative(path: pathlib.Path) -> str:
    return path.relative_to(REPO).as_posix()


def own_layer(path: pathlib.Path) -> int:
    name = relative(path)
    return RUNNER_LAYER if "/" not in name else LAYERS[name.split("/")[0]]


def test_imports_only_go_down():
    upward = []
    for path in project_modules():
        mine = own_layer(path)
        for line, module in imported_modules(path):
            theirs = layer_of(module)
            if theirs is not None and theirs > mine:
                upward.append(f"{relative(path)}:{line} imports {module}")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


# The names the project's modules had at the top of site-packages before the one package.
BARE_NAMES = set(LAYERS) | ROOT_MODULES


def test_every_import_of_the_project_names_its_package():
    """`from modeling import ...` would load a second copy of a module (from the checkout, beside
    the installed `bert_tf2.modeling`), with classes that are not the package's."""
    files = [*project_modules(), *REPO.glob("tests/*.py"), *REPO.glob("bench/*.py"),
             *REPO.glob("examples/*.py")]
    bare = [f"{relative(path)}:{line} imports {module}" for path in files
            for line, module in imported_modules(path)
            if module.split(".")[0] in BARE_NAMES or module.split(".")[0].startswith("run_")]
    assert not bare, "imports without the bert_tf2 package:\n" + "\n".join(bare)


def test_tasks_do_not_import_each_other():
    crossing = []
    shared = {path.stem for path in (REPO / "tasks").glob("*.py")}  # tensors, prediction_files
    for path in (REPO / "tasks").rglob("*.py"):
        parts = path.relative_to(REPO / "tasks").parts
        if len(parts) < 2:
            continue  # tasks/tensors.py, tasks/__init__.py: shared by all tasks
        for line, module in imported_modules(path):
            names = (project_part(module) or "").split(".")
            if names[0] == "tasks" and len(names) > 1 and names[1] not in (parts[0], *shared):
                crossing.append(f"{relative(path)}:{line} imports {module}")
    assert not crossing, "a task imports another task:\n" + "\n".join(crossing)


@pytest.mark.integration
def test_the_search_knows_no_task_and_no_task_knows_the_search():
    """A search runs the runners as commands; it reads what runs write, never a task's code."""
    crossing = [f"{relative(path)}:{line} imports {module}"
                for package, other in (("search", "tasks"), ("tasks", "search"))
                for path in sorted((REPO / package).rglob("*.py"))
                for line, module in imported_modules(path)
                if (project_part(module) or "").split(".")[0] == other]
    assert not crossing, "\n".join(crossing)
    # The search process loads no TensorFlow: its trials do.
    assert top_packages_loaded(["bert_tf2.search.study", "bert_tf2.search.report", "bert_tf2.search.runner_check"],
                               {"tensorflow", "keras", "tasks", "modeling", "data_gen"}) == []


def test_inference_knows_no_training_engine():
    """Answering texts needs no trainer: `inference/` imports nothing of `engine/`."""
    crossing = [f"{relative(path)}:{line} imports {module}"
                for path in sorted((REPO / "inference").rglob("*.py"))
                for line, module in imported_modules(path)
                if (project_part(module) or "").split(".")[0] == "engine"]
    assert not crossing, "\n".join(crossing)


def test_only_front_doors_read_flags():
    readers = []
    for path in project_modules():
        name = relative(path)
        if own_layer(path) == RUNNER_LAYER or name in FRONT_DOORS:
            continue
        if any(module.startswith("absl.flags") for _, module in imported_modules(path)):
            readers.append(name)
    assert not readers, "modules below the runners that use absl flags: " + ", ".join(readers)


def test_the_layer_rule_sees_an_upward_import(tmp_path):
    """The check above can fail: an import of a task from modeling is an upward import."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from bert_tf2.tasks.squad import metrics\n")
    assert [layer_of(m) for _, m in imported_modules(bad)] == [LAYERS["tasks"]]
    assert LAYERS["tasks"] > LAYERS["modeling"]


def top_packages_loaded(modules: list, packages: set) -> list:
    """Which of `packages` a fresh process has loaded after importing `modules`."""
    script = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
              f"print(sorted({{m.removeprefix('{PACKAGE}.').split('.')[0] for m in sys.modules}}"
              f" & {packages!r}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_the_encoder_loads_without_data_gen_engine_or_tasks():
    assert top_packages_loaded(["bert_tf2.modeling.encoder"],
                               {"data_gen", "engine", "tasks", "runner_flags"}) == []


# What marks process machinery: OS locks, signals, exit hooks, the fault points' environment.
PROCESS_MODULES = {"fcntl", "signal", "atexit", "threading", "tempfile", "importlib.abc"}


def test_modeling_holds_no_process_machinery():
    """`modeling/` is the math and checkpoint I/O: no module of it takes locks, handles signals,
    hooks the exit or the import system; those live in `process/`, the floor below."""
    found = []
    for path in sorted((REPO / "modeling").rglob("*.py")):
        for line, module in imported_modules(path):
            if any(module == m or module.startswith(m + ".") for m in PROCESS_MODULES):
                found.append(f"{relative(path)}:{line} imports {module}")
    assert not found, "process machinery in modeling/:\n" + "\n".join(found)
    machinery = {p.stem for p in (REPO / "process").glob("*.py")} - {"__init__"}
    assert machinery >= {"errors", "atomic_files", "output_lock", "fault_points", "flag_ranges",
                         "environment"}
    assert not machinery & {p.stem for p in (REPO / "modeling").glob("*.py")}


@pytest.mark.integration
def test_the_ground_floor_loads_alone():
    """Every module of `process/` imports without TensorFlow, Keras or any floor above it."""
    modules = sorted(f"{PACKAGE}.process.{p.stem}" for p in (REPO / "process").glob("*.py")
                     if p.stem != "__init__")
    assert top_packages_loaded(modules, {"tensorflow", "keras", "modeling", "data_gen", "engine",
                                         "tasks", "runner_flags"}) == []


NUMBERS = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def drawn_floors(text: str, pattern: str) -> dict:
    """{name: floor} of each line of a drawing that `pattern` (name, floor groups) matches."""
    import re

    return {m.group("name").rstrip("/"): int(m.group("floor"))
            for m in re.finditer(pattern, text, re.M)}


def expected_floors() -> dict:
    return {**LAYERS, "runners": RUNNER_LAYER}


def test_the_docs_draw_these_floors():
    """The README's layout and docs/architecture.md's drawing name each floor as `LAYERS` does,
    and say how many there are; the architecture's table names only modules that exist."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Project layout", 1)[1].split("```", 2)[1]
    drawn = drawn_floors(layout, r"^(?P<name>[a-z_]+/|run_\*\.py)\s+(?P<floor>\d)\s")
    drawn["runners"] = drawn.pop("run_*.py")
    assert drawn == expected_floors()
    count = NUMBERS[RUNNER_LAYER]
    assert f"{count.capitalize()} floors" in readme.split("## Project layout", 1)[1][:200]

    architecture = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawing = architecture.split("## The floors", 1)[1].split("```", 2)[1]
    drawn = drawn_floors(drawing, r"^\s+(?P<floor>\d)\s+(?P<name>[a-z_]+/?)\s")
    assert drawn == expected_floors()
    assert f"the {count} floors" in architecture[:400]

    table = architecture.split("## What lives where", 1)[1].split("\n## ", 1)[0]
    missing, floor = [], None
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        floor = cells[0] or floor
        for name in (n.strip("` /") for n in cells[1].split(",")):
            if not ((REPO / floor / f"{name}.py").is_file() or (REPO / floor / name).is_dir()):
                missing.append(f"{floor}/{name}")
    assert not missing, "docs/architecture.md names modules that do not exist: " + \
        ", ".join(missing)


def test_the_drawing_check_sees_a_wrong_floor():
    drawn = drawn_floors("engine/       5  training\n", r"^(?P<name>[a-z_]+/)\s+(?P<floor>\d)\s")
    assert drawn == {"engine": 5} != {"engine": LAYERS["engine"]}
