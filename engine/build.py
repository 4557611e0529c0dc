"""What every training run does before its first step: settings, model files, devices, the trainer.

`RunSettings` holds the values the runners' shared engine flags give (`runner_flags`): where
outputs go, the model's files, batch sizes and the optimiser's schedule, devices and precision.
`model_files` finds the config and vocabulary (given, or beside `--init_checkpoint`); `start_run`
seeds every random generator, sets the precision policy, builds the distribution strategy and
says which process writes the outputs; `build_trainer` makes the model (with its initial weights),
the SPEC.md section 7 optimiser (linear warmup, linear decay, AdamWeightDecay or LAMB, clipping at
global norm 1) under the strategy, and the trainer that runs them: `engine.training.Trainer` on
TensorFlow, `engine.keras_training.KerasTrainer` on JAX (docs/backends.md).
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

from bert_tf2.engine.trainer_config import TrainerConfig
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunSettings:
    """The settings every training run shares (pretraining and fine-tuning). The runners' flags
    take their defaults from here (`runner_flags`), and the trainer's come from `TrainerConfig`:
    each default is written once."""

    output_dir: str
    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    vocab_file: str | None = None
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int | None = None
    num_warmup_steps: int | None = None
    save_checkpoints_steps: int = TrainerConfig.save_checkpoints_steps
    keep_checkpoint_max: int = TrainerConfig.keep_checkpoint_max
    steps_per_loop: int = TrainerConfig.steps_per_loop
    optimizer: str = "adamw"
    num_accumulation_steps: int = TrainerConfig.num_accumulation_steps
    dtype: str = "float32"
    jit_compile: bool = TrainerConfig.jit_compile
    # XLA-compile the update (one device); None: where it pays for its compile.
    compile_optimizer: bool | None = TrainerConfig.compile_optimizer
    distribution_strategy: str = "one_device"
    tpu_address: str | None = None
    random_seed: int = 12345


@dataclasses.dataclass
class Run:
    """A started run: the model's files, the strategy, and where this process writes."""

    config: object  # modeling.config.BertConfig
    vocab_file: str | None
    strategy: object
    work_dir: str  # the chief's output_dir; other workers' scratch
    chief: bool


TRAINING_BACKENDS = ("tensorflow", "jax")


def check_backend() -> None:
    """Training, evaluation and prediction run on TensorFlow and JAX (docs/backends.md): on
    another Keras backend the run is refused before anything is read."""
    from bert_tf2.process import environment

    if environment.backend() not in TRAINING_BACKENDS:
        raise SettingsError(f"the runners train and predict on the tensorflow and jax backends, "
                            f"not {environment.backend()} (KERAS_BACKEND); the encoder runs on "
                            f"{environment.backend()} (docs/backends.md)")


def model_files(settings: RunSettings, vocab_required: bool = True):
    """(BertConfig, vocab path) from `bert_config_file` / `vocab_file`, else from the files
    beside `init_checkpoint`."""
    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.config import BertConfig

    if settings.bert_config_file:
        config = BertConfig.from_json_file(settings.bert_config_file)
    else:
        config = checkpoints.read_config(settings.init_checkpoint)
    vocab = settings.vocab_file
    if not vocab and settings.init_checkpoint:
        vocab = checkpoints.vocab_beside(settings.init_checkpoint)
    if vocab and not os.path.isfile(vocab) and "://" not in vocab:
        raise SettingsError(f"--vocab_file {vocab}: no such file")
    if not vocab and vocab_required:
        raise SettingsError("--vocab_file is required (no vocab.txt beside --init_checkpoint)")
    if vocab and "://" not in vocab:
        check_vocab_fits(config, vocab)
    return config, vocab


def check_vocab_fits(config, vocab_file: str) -> None:
    """Every id of `vocab_file` needs a row of the word embeddings: a vocabulary longer than
    `vocab_size` is refused, naming both numbers and both files (a shorter one is fine: the
    original's checkpoints pad the table)."""
    from bert_tf2.data_gen.tokenization import load_vocab_tokens
    from bert_tf2.modeling.config import ConfigError

    size = len(load_vocab_tokens(vocab_file))  # ids are line numbers
    if size > config.vocab_size:
        raise ConfigError(
            f"{vocab_file}: {size} tokens, but {config.source or 'the bert config'} says "
            f"vocab_size={config.vocab_size}, so ids {config.vocab_size} to {size - 1} have no "
            f"embedding; use the model's own vocab.txt and bert_config.json together")


def held_outputs(settings: RunSettings, **others) -> dict:
    """The outputs this process must hold for the run (`process.output_lock.holding`):
    `output_dir` and `others` (`export_dir=...`), for the process that writes them."""
    from bert_tf2.engine.distribution import writes_outputs

    check_output_dir(settings.output_dir)
    if not writes_outputs(settings.distribution_strategy):
        return {}
    outputs = {settings.output_dir: "--output_dir"}
    for name, path in others.items():
        if path:
            check_output_dir(path, f"--{name}")
            outputs[path] = f"--{name}"
    return outputs


def start_run(settings: RunSettings, config, vocab_file: str | None) -> Run:
    """Seeds, precision and the strategy; call before building any model. Nothing is written
    yet: `open_output` makes the folders, once every check that can refuse the run passed."""
    from bert_tf2.engine.distribution import get_strategy, set_precision, set_random_seed
    from bert_tf2.engine.trainer_config import worker_dir
    from bert_tf2.process import environment

    if environment.uses_tensorflow():
        set_random_seed(settings.random_seed)
        set_precision(settings.dtype)
        strategy = get_strategy(settings.distribution_strategy, settings.tpu_address)
    else:  # JAX's processes must find each other before anything of JAX runs
        strategy = get_strategy(settings.distribution_strategy, settings.tpu_address)
        set_random_seed(settings.random_seed)
        set_precision(settings.dtype)
    work_dir = worker_dir(strategy, settings.output_dir)
    return Run(config, vocab_file, strategy, work_dir, chief=work_dir == settings.output_dir)


def check_output_dir(output_dir: str, flag: str = "--output_dir") -> None:
    """`--output_dir` (or another output folder's `flag`) must be a folder, or not exist yet."""
    if "://" not in output_dir and os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise SettingsError(f"{flag} {output_dir}: is a file, not a folder; name a folder "
                            f"(it is created if missing)")


def open_output(run: Run, settings: RunSettings) -> None:
    """Make the output folders: the first write of a run, after every check passed; remove the
    temporary files a killed run left there (the lock is held: no live writer owns them)."""
    from bert_tf2.process.atomic_files import remove_temporary_files

    os.makedirs(settings.output_dir, exist_ok=True)
    os.makedirs(run.work_dir, exist_ok=True)
    for path in remove_temporary_files(run.work_dir):
        logger.info("removed %s, a partial file left by an interrupted run", path)


def check_batch_split(settings: RunSettings, replicas: int) -> None:
    """The global training batch must split into equal micro-batches on every replica."""
    per_replica = settings.train_batch_size // replicas
    if settings.train_batch_size % replicas or per_replica % settings.num_accumulation_steps:
        raise SettingsError(f"--train_batch_size={settings.train_batch_size} does not split into "
                            f"{replicas} replica(s) x --num_accumulation_steps="
                            f"{settings.num_accumulation_steps} equal micro-batches")


def build_trainer(model_fn: Callable, task, strategy, settings: RunSettings,
                  num_train_steps: int, num_warmup_steps: int, **trainer_config):
    """The model (`model_fn()`, with `settings.init_checkpoint`'s weights; new heads stay
    initialised and the log says so) and optimiser, in a `Trainer`. `trainer_config` sets the
    `TrainerConfig` fields that differ between pretraining and fine-tuning."""
    import keras

    from bert_tf2.modeling import checkpoints
    from bert_tf2.modeling.optimization import create_optimizer
    from bert_tf2.process import environment

    if environment.uses_tensorflow():
        from bert_tf2.engine.training import Trainer
    else:
        from bert_tf2.engine.keras_training import KerasTrainer as Trainer

    report = None
    with strategy.scope():
        model = model_fn()
        if settings.init_checkpoint:
            report = checkpoints.load_initial_weights(model, settings.init_checkpoint,
                                                      allow_new_heads=True)  # logs it
        optimizer = create_optimizer(settings.learning_rate, num_train_steps, num_warmup_steps,
                                     settings.optimizer,
                                     on_time=trainer_config.get("time_budget") is not None)
        if settings.dtype == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = Trainer(model, optimizer, task, strategy, TrainerConfig(
        output_dir=settings.output_dir, num_train_steps=num_train_steps,
        steps_per_loop=settings.steps_per_loop,
        save_checkpoints_steps=settings.save_checkpoints_steps,
        keep_checkpoint_max=settings.keep_checkpoint_max,
        num_accumulation_steps=settings.num_accumulation_steps,
        jit_compile=settings.jit_compile, compile_optimizer=settings.compile_optimizer,
        examples_per_step=settings.train_batch_size,
        **trainer_config))
    trainer.init_report = report
    trainer.init_checkpoint = settings.init_checkpoint
    return trainer
