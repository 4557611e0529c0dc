"""Every trial's command line checked by the runner's own flag parser before any trial runs.

The runner's flags the user gives after `--` are first checked against the search's own:
`runner_flags_for` refuses a flag the search sets (the output folder, the seed, prediction and
export), one it searches, a `--best_metric` other than `--metric`, and pruning with evaluations
that are not at epoch ends.

A search of 24 trials that fails at the first one's flags, or worse at the thirteenth, wastes the
user's afternoon. So the search loads the runner's flag definitions in a child process (the runner
module defines them when imported; nothing else runs, TensorFlow is not loaded) and parses, with
absl and the runner's range checks, the command line of each configuration to be run (a sampled
dimension's two ends); the first refusal is the search's one-line error.
"""
from __future__ import annotations

import json
import os

from bert_tf2.process import child_python
from bert_tf2.process.errors import SettingsError
from bert_tf2.search.space import RESERVED, config_name

# The fine-tuning runners a search can run (module names).
RUNNERS = ("run_classifier", "run_squad", "run_ner", "run_multiple_choice")
# Runner flags the search sets for every trial: given after --, they are dropped.
SET_BY_SEARCH = ("do_train", "do_eval", "nodo_train", "nodo_eval")

_PROBE = """
import importlib, json, sys
from absl import flags
runner = importlib.import_module("bert_tf2." + sys.argv[1])
FLAGS = flags.FLAGS
command_lines = json.loads(sys.stdin.read())
errors = []
for argv in command_lines:
    FLAGS.unparse_flags()
    try:
        FLAGS([sys.argv[1]] + argv)
        errors.append(None)
    except flags.Error as e:
        errors.append(str(e))
metric = None
if sys.argv[2:] == ["--check_metric"] and errors and errors[0] is None:
    # The key best/ is kept by, against the keys the task's evaluation writes.
    from bert_tf2 import runner_flags
    from bert_tf2.engine.finetuning import check_best_metric
    from bert_tf2.process.errors import UserError
    FLAGS.unparse_flags()
    FLAGS([sys.argv[1]] + command_lines[0])
    task = None
    try:
        checked = runner.build_task()
        checked.check(runner_flags.finetune_settings(FLAGS.best_metric))
        task = checked
        check_best_metric(task, FLAGS.best_metric)
    except UserError as e:  # the task's own refusal, or the metric's
        errors[0], metric = (str(e), None) if task is None else (None, str(e))
print(json.dumps({"flags": sorted(FLAGS), "errors": errors, "metric": metric}))
"""


def runner_module(name: str) -> str:
    """`run_classifier`, `run_classifier.py` or a path to it, as the module name."""
    module = os.path.basename(name or "")
    module = module[:-3] if module.endswith(".py") else module
    if module not in RUNNERS:
        raise SettingsError(f"--runner={name}: a search runs one of {', '.join(RUNNERS)}")
    return module


def check_command_lines(runner: str, command_lines: list[list[str]], describe: list[str],
                        metric: str | None = None, metric_flag: str = "--metric") -> None:
    """Parse each command line (flags only) with `runner`'s flags; a SettingsError naming the
    first one refused (`describe[i]` says where it came from). With `metric` (the search's
    --metric, given to the runner as --best_metric), also build the runner's task from the first
    command line, check it as the runner would, and check that its evaluation writes that key
    (`metric_flag` names where the key came from): a key no trial would write is refused before
    the study or a trial's folder exists."""
    probe = child_python.run(["-c", _PROBE, runner, *(["--check_metric"] if metric else [])],
                             input=json.dumps(command_lines))
    if probe.returncode != 0:
        raise SettingsError(f"--runner={runner}: its flags could not be loaded: "
                            f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    answer = json.loads(probe.stdout.strip().splitlines()[-1])
    for where, error in zip(describe, answer["errors"]):
        if error:
            raise SettingsError(f"{where}: {runner} refuses it: {error}")
    if answer["metric"]:
        reason = answer["metric"].partition(": ")[2] or answer["metric"]
        raise SettingsError(f"{metric_flag}={metric}: {runner} never writes it ({reason})")


def flag_value(flags: list, name: str, default: str | None = None) -> str | None:
    """The value of `--name=value` among `flags` (the last one given), else `default`."""
    value = default
    for flag in flags:
        key, sep, text = flag.lstrip("-").partition("=")
        if key == name and sep:
            value = text
    return value


def runner_flags_for(argv: list, space, metric: str | None, prune: bool
                     ) -> tuple[list, str | None]:
    """The runner's flags given after `--`, checked against the search (`space`, `--metric`,
    `--prune`), with `--best_metric=METRIC` added when `metric` is given; and the metric the
    search chooses by (`metric`, else the runner's `--best_metric`, else None: the runner's
    default, read from its runs)."""
    given = []
    for arg in argv:
        if not arg.startswith("-"):
            raise SettingsError(f"{arg!r}: the runner's flags go after -- (each as --name=value)")
        name = arg.lstrip("-").partition("=")[0]
        if name in SET_BY_SEARCH:
            continue
        if name == "random_seed":
            raise SettingsError(f"{arg}: give --random_seed to run_search (before --): it is the "
                                f"first of the trials' seeds")
        base = name[2:] if name.startswith("no") and name[2:] in RESERVED else name
        if base in RESERVED:
            raise SettingsError(f"{arg}: {RESERVED[base]}")
        if name in space.names() or name.startswith("no") and name[2:] in space.names():
            raise SettingsError(f"{arg}: --{name.removeprefix('no')} is searched; remove it from "
                                f"the runner's flags")
        given.append(arg)
    if space.is_grid:
        names = [config_name(config) for config in space.grid()]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise SettingsError(f"--grid: two configurations would share the folder name "
                                f"{twice[0]!r}; write the values apart")
    best_metric = flag_value(given, "best_metric")
    if metric and best_metric and metric != best_metric:
        raise SettingsError(f"--metric={metric}: the runner's --best_metric={best_metric} keeps "
                            f"best/ by another key; give one of them")
    if metric and not best_metric:
        given.append(f"--best_metric={metric}")  # best/ kept by the key the search chooses by
    if prune:
        for name in ("eval_every_steps", "num_train_steps"):
            if flag_value(given, name) not in (None, "0"):
                raise SettingsError(f"--{name}: pruning compares trials at epoch ends; with "
                                    f"--{name} use --noprune")
    return given, metric or best_metric
