"""Every default is written once: each flag that sets a settings field has that field's default.

The runners' flags take their defaults from the settings the engine and the server run by
(`FinetuneSettings`, `PretrainSettings`, `ServerSettings`), and those from the trainer's
(`TrainerConfig`) and the batcher's. A runner may declare its own default for a field (the
original script's: run_squad's max_seq_length of 384); the test reads those declarations from the
runner's source, so an undeclared difference fails.
"""
import ast
import dataclasses
import importlib
import inspect
import json
import sys

import pytest
import warm_python
from conftest import REPO

# A flag that sets a differently named field; --steps_per_loop, the alias of
# --iterations_per_loop (None: that flag's value); and --best_metric, whose field's None means
# "eval_" + the task's main metric, which a runner may name in its flag (checked against the
# task below).
ALIASES = {"iterations_per_loop": "steps_per_loop"}
NOT_FIELDS = {"steps_per_loop", "best_metric"}
# The runner's task class, whose main metric its --best_metric names.
TASKS = {"run_classifier": "classification.task:ClassificationTask",
         "run_squad": "squad.task:SquadTask", "run_ner": "ner.task:NerTask",
         "run_multiple_choice": "multiple_choice.task:MultipleChoiceTask"}

_FLAG_DEFAULTS = """
import importlib, json, sys
from absl import flags
importlib.import_module(sys.argv[1])
print(json.dumps({name: flags.FLAGS[name].default for name in flags.FLAGS}))
"""


def flag_defaults(module: str) -> dict:
    result = warm_python.run([sys.executable, "-c", _FLAG_DEFAULTS, module], cwd=REPO, warm=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def declared_overrides(runner: str) -> dict:
    """The keyword arguments the runner passes to `define_finetuning_flags`."""
    tree = ast.parse((REPO / f"{runner}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == \
                "define_finetuning_flags":
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return {}


def field_defaults(settings_class) -> dict:
    return {f.name: f.default for f in dataclasses.fields(settings_class)
            if f.default is not dataclasses.MISSING}


def mismatches(flags: dict, fields: dict, overrides: dict) -> list:
    found = []
    for flag, default in flags.items():
        if flag in NOT_FIELDS:
            continue
        field = ALIASES.get(flag, flag)
        if field in fields:
            expected = overrides.get(field, fields[field])
            if default != expected:
                found.append(f"--{flag}={default!r}, {field} = {expected!r}")
    return found


@pytest.mark.integration
@pytest.mark.parametrize("runner", ["run_classifier", "run_squad", "run_ner",
                                    "run_multiple_choice"])
def test_fine_tuning_flags_default_to_the_fine_tuning_settings(runner):
    from bert_tf2.engine.finetuning import FinetuneSettings

    flags = flag_defaults(f"bert_tf2.{runner}")
    fields = field_defaults(FinetuneSettings)
    shared = {ALIASES.get(f, f) for f in flags} & set(fields)
    assert len(shared) >= 25, sorted(shared)  # the check sees the engine's and the original's
    assert mismatches(flags, fields, declared_overrides(runner)) == []
    module, name = TASKS[runner].split(":")
    task = getattr(importlib.import_module(f"bert_tf2.tasks.{module}"), name)
    assert flags["best_metric"] in (None, f"eval_{task.main_metric}")


@pytest.mark.integration
def test_pretraining_flags_default_to_the_pretraining_settings():
    from bert_tf2.engine.pretraining import PretrainSettings

    flags = flag_defaults("bert_tf2.run_pretraining")
    fields = field_defaults(PretrainSettings)
    assert len({ALIASES.get(f, f) for f in flags} & set(fields)) >= 18
    assert mismatches(flags, fields, {}) == []
    # The original run_pretraining's own defaults, where they differ from fine-tuning's.
    assert (flags["num_train_steps"], flags["num_warmup_steps"], flags["iterations_per_loop"],
            flags["keep_checkpoint_max"]) == (100000, 10000, 1000, 5)


@pytest.mark.integration
def test_server_flags_default_to_the_server_settings_and_the_batcher_to_them():
    from bert_tf2.model_server.batching import DynamicBatcher
    from bert_tf2.model_server.settings import ServerSettings

    flags = flag_defaults("bert_tf2.serve")
    fields = field_defaults(ServerSettings)
    assert set(fields) - {"export_dir", "model_name"} <= set(flags)
    assert mismatches(flags, fields, {}) == []
    batcher = {name: p.default for name, p in
               inspect.signature(DynamicBatcher.__init__).parameters.items()
               if name in fields}
    assert batcher == {name: fields[name] for name in batcher} and len(batcher) == 4
    assert fields["batch_timeout_micros"] == 0  # what serve.py has always defaulted to


def test_the_run_settings_take_the_trainers_defaults():
    from bert_tf2.engine.build import RunSettings
    from bert_tf2.engine.trainer_config import TrainerConfig

    run, trainer = field_defaults(RunSettings), field_defaults(TrainerConfig)
    shared = set(run) & set(trainer)
    assert shared >= {"keep_checkpoint_max", "steps_per_loop", "save_checkpoints_steps",
                      "num_accumulation_steps", "jit_compile", "compile_optimizer"}
    assert {name: run[name] for name in shared} == {name: trainer[name] for name in shared}
    assert trainer["keep_checkpoint_max"] == 1  # fine-tuning keeps best/ besides


def test_a_mismatch_is_seen():
    """The comparison can fail: a flag whose default differs from its field's is listed."""
    assert mismatches({"keep_checkpoint_max": 5}, {"keep_checkpoint_max": 1}, {}) == [
        "--keep_checkpoint_max=5, keep_checkpoint_max = 1"]
    assert mismatches({"iterations_per_loop": 100}, {"steps_per_loop": 1000}, {}) != []
    assert mismatches({"max_seq_length": 384}, {"max_seq_length": 128},
                      {"max_seq_length": 384}) == []
