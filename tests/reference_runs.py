"""The command lines and data slices of the runs that several test files assert on, written once.

conftest.py makes each run once per test run (`shared_builds`) and hands it out as a session
fixture: the MRPC classifier run with its export, the pretraining records and run, the two-shard
records and the extract_features lines that the kill, signal, JAX and user-error tests compare
their own runs with; and the small MRPC classifier export with LiteRT files that the fast path and
the model server answer with.
"""
import os
import subprocess
import sys

import warm_python

REPO = warm_python.REPO


def run(command, env_extra=None) -> subprocess.CompletedProcess:
    """`command` (a runner of this checkout and its flags, or `-m module ...`) as its own process
    (forked from the warm Python), its output captured."""
    return warm_python.run([sys.executable, *map(str, command)], cwd=REPO,
                           env={**os.environ, **(env_extra or {})}, timeout=900)


def run_ok(command, env_extra=None) -> subprocess.CompletedProcess:
    result = run(command, env_extra)
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stderr[-4000:]}"
    return result


def make_no_tensorflow(folder) -> None:
    """`tensorflow` and `tensorflow_text` packages in `folder` that fail to import, as they do
    where they are not installed; first on PYTHONPATH, the folder reaches every child process."""
    for name in ("tensorflow", "tensorflow_text"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")


def without_tensorflow(no_tensorflow) -> str:
    """PYTHONPATH with the folder that hides TensorFlow first (the rest kept)."""
    return os.pathsep.join(filter(None, [str(no_tensorflow), os.environ.get("PYTHONPATH")]))


def run_jax(no_tensorflow, script, *flags, env=None, check=True, warm=None):
    """`script` (a runner of this checkout, or `-m module`; a test's helper script forked too
    with `warm=True`) on JAX without TensorFlow."""
    command = [sys.executable, *(flags if script == "-m" else [str(REPO / script), *flags])]
    environment = {**os.environ, "KERAS_BACKEND": "jax",
                   "PYTHONPATH": without_tensorflow(no_tensorflow), **(env or {})}
    result = warm_python.run(list(map(str, command)), cwd=REPO, env=environment, timeout=900,
                             warm=warm)
    if check and result.returncode:
        raise AssertionError(f"{script} failed on JAX:\n{result.stderr[-4000:]}")
    return result


def glue_slice(shared_data, task, destination, rows):
    """The first `rows[split]` data rows of each split, header (and BOM) kept as GLUE ships them."""
    destination.mkdir(parents=True, exist_ok=True)
    for split, count in rows.items():
        source = shared_data / "glue" / task / f"{split}.tsv"
        lines = source.read_bytes().split(b"\n")
        header = 0 if task == "CoLA" and split != "test" else 1
        (destination / f"{split}.tsv").write_bytes(b"\n".join(lines[:header + count]) + b"\n")
    return destination


# ----------------------------------------------------------------------------- fine-tuning
MRPC_ROWS = {"train": 48, "dev": 24, "test": 8}


def classifier(data, checkpoint, out, export=None, *extra):
    """The small MRPC classifier: 12 steps, evaluated every 3, `best/` kept by eval_loss (the best
    is step 9 of 12, improving at 3, 6 and 9, so a skipped or repeated evaluation shows). Its
    export is the SavedModel alone: the LiteRT file (test_litert.py) adds 1.7 s to each run
    that exports, and the kill, signal and refusal tests read only the SavedModel."""
    return ["run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={checkpoint}/bert_model.ckpt", "--max_seq_length=64",
            "--train_batch_size=8", "--num_train_epochs=2", "--eval_every_steps=3",
            "--best_metric=eval_loss", "--learning_rate=1e-3", f"--output_dir={out}",
            "--do_train", "--do_eval", "--do_predict",
            *([f"--export_dir={export}", "--export_litert=none"] if export else []), *extra]


def make_classifier_reference(folder, data, checkpoint) -> dict:
    """`classifier` run uninterrupted into `folder/out`, exported to `folder/export`."""
    result = run_ok(classifier(data, checkpoint, folder / "out", folder / "export"))
    return {"log": result.stderr}


# ----------------------------------------------------------------------------- pretraining
def pretraining_records_command(shared_data, checkpoint, path):
    """Records of WikiText-2 valid at sequence 64, 10 predictions, one pass."""
    return ["-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={shared_data}/corpus/wikitext-2/valid.txt", f"--output_file={path}",
            f"--vocab_file={checkpoint}/vocab.txt", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=1"]


def pretraining(records, checkpoint, out, *extra):
    """20 steps in loops of 5, checkpoints at 10 and 20, then 5 evaluation steps and the TF1
    export."""
    return ["run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
            f"--bert_config_file={checkpoint}/bert_config.json", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--train_batch_size=8", "--learning_rate=1e-3",
            "--num_train_steps=20", "--num_warmup_steps=3", "--steps_per_loop=5",
            "--save_checkpoints_steps=10", "--do_train", "--do_eval", "--max_eval_steps=5",
            f"--vocab_file={checkpoint}/vocab.txt", *extra]


# ----------------------------------------------------------------------------- the data tools
def two_shards_command(shared_data, checkpoint, folder):
    """create_pretraining_data on WikiText-2 valid into two shards of `folder`, two workers and
    pools small enough that there are several."""
    return ["-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
            f"--input_file={shared_data}/corpus/wikitext-2/valid.txt",
            f"--output_file={folder}/a.tfrecord,{folder}/b.tfrecord",
            f"--vocab_file={checkpoint}/vocab.txt", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--dupe_factor=1", "--num_workers=2",
            "--pool_bytes=200000"]


def sst2_lines(shared_data, path, count=120):
    """The first `count` sentences of SST-2 dev, one a line, written to `path`."""
    text = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    path.write_text("\n".join(row.split("\t")[0] for row in text.splitlines()[1:count + 1])
                    + "\n")
    return path


def extract_features_command(lines, checkpoint, folder, lines_per_shard=40):
    """extract_features of `lines` into `folder/features.jsonl`, in parts of 40 lines."""
    return ["extract_features.py", f"--input_file={lines}",
            f"--output_file={folder}/features.jsonl",
            f"--init_checkpoint={checkpoint}/bert_model.ckpt", "--max_seq_length=32",
            "--layers=-1", f"--lines_per_shard={lines_per_shard}"]


# ----------------------------------------------------------------------------- serving
def make_random_export(module_of, minilm_dir, path, litert="float32", initializer_range=0.02):
    """A tiny random BERT (seeded) in a task's serving module, exported with a LiteRT file."""
    import keras
    from conftest import TINY

    from bert_tf2.engine import export
    from bert_tf2.modeling.config import BertConfig
    from bert_tf2.modeling.encoder import BertEncoder

    keras.utils.set_random_seed(7)
    vocab = str(minilm_dir / "vocab.txt")
    config = BertConfig.from_dict({**TINY, "initializer_range": initializer_range})
    export.save(module_of(BertEncoder(config), vocab), str(path),
                {"vocab.txt": vocab}, litert=litert)
    return path


def make_pair_export(folder, shared_data, checkpoint) -> None:
    """MRPC pairs: a tiny BERT trained 6 steps, exported with its float32 and int8 LiteRT files
    to `folder/out/serving`; the data (64 train, 80 dev rows) in `folder/data`."""
    data = glue_slice(shared_data, "MRPC", folder / "data", {"train": 64, "dev": 80})
    out = folder / "out"
    run_ok(["run_classifier.py", "--task_name=MRPC", f"--data_dir={data}",
            f"--output_dir={out}", f"--init_checkpoint={checkpoint / 'bert_model.ckpt'}",
            "--do_train", "--num_train_steps=6", "--max_seq_length=48",
            f"--export_dir={out / 'serving'}", "--export_litert=float32"])
