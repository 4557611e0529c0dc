"""run_squad.py end to end on real SQuAD paragraphs, with a small random BERT (real vocabulary).

The path is the real one: SQuAD JSON -> cached window features -> training with evaluation every
epoch (official EM/F1) -> best checkpoint -> predictions.json, nbest_predictions.json and, for
SQuAD 2.0, null_odds.json -> a SavedModel answering raw questions about raw contexts. The tiny
model learns little; what is checked is that every piece agrees with every other one.
"""
import json

import pytest
from conftest import read_results, run_script

from bert_tf2.tasks.squad import metrics as squad_metrics
from bert_tf2.tasks.squad.files import load_squad, make_v2, write_json

pytestmark = pytest.mark.integration


def run_squad(*flags, check=True):
    return run_script("run_squad.py", *flags, check=check)


results = read_results


def paragraphs(squad: dict, article: int, count: int) -> dict:
    source = squad["data"][article]
    return {"version": "1.1", "data": [{"title": source["title"],
                                        "paragraphs": source["paragraphs"][:count]}]}


def questions(dataset: dict) -> list:
    return [qa for article in dataset["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


@pytest.fixture(scope="module")
def squad(shared_data):
    return load_squad(shared_data / "squad" / "dev-v1.1.json")


@pytest.fixture(scope="module")
def squad_run(tmp_path_factory, squad, tiny_checkpoint):
    """Train on the first 8 paragraphs of article 0 (about 50 questions), evaluate on the first 4
    of article 40, at sequence 128 with a 48-token stride so long contexts take several windows."""
    root = tmp_path_factory.mktemp("squad")
    train, dev = root / "train.json", root / "dev.json"
    write_json(train, paragraphs(squad, 0, 8))
    write_json(dev, paragraphs(squad, 40, 4))
    out = root / "out"
    flags = [f"--train_file={train}", f"--predict_file={dev}", f"--output_dir={out}",
             f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=128",
             "--doc_stride=48", "--max_query_length=32", "--train_batch_size=8",
             "--num_train_epochs=2", "--learning_rate=1e-3", "--predict_batch_size=16"]
    first = run_squad(*flags, "--do_train", "--do_eval", "--do_predict",
                      f"--export_dir={root / 'export'}")
    return {"root": root, "train": train, "dev": dev, "out": out, "flags": flags,
            "log": first.stderr}


def test_training_evaluates_every_epoch_and_predictions_score_as_logged(squad_run):
    out, log = squad_run["out"], squad_run["log"]
    train = load_squad(squad_run["train"])
    steps_per_epoch = len(questions(train)) / 8  # the original counts questions, not windows
    assert f"{len(questions(train))} training questions in" in log
    step = round(steps_per_epoch)
    assert f"evaluation at step {step} (epoch {step / steps_per_epoch:.2f})" in log
    final = results(out / "eval_results.txt")
    assert final["global_step"] == int(len(questions(train)) / 8 * 2)
    assert {"eval_exact_match", "eval_f1"} <= set(final)
    best = results(out / "best" / "eval_results.txt")
    assert best["eval_f1"] >= final["eval_f1"]
    # predictions.json is what the kept (best) weights answer; the official scorer agrees.
    dev = load_squad(squad_run["dev"])
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == [qa["id"] for qa in questions(dev)]
    scored = squad_metrics.squad_v1_scores(dev["data"], predictions)
    assert scored["f1"] == pytest.approx(best["eval_f1"], abs=1e-9)
    assert scored["exact_match"] == pytest.approx(best["eval_exact_match"], abs=1e-9)
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= 20
        assert entries[0]["text"] == predictions[qid]
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
        scores = [e["start_logit"] + e["end_logit"] for e in entries]
        assert scores == sorted(scores, reverse=True)
    assert not (out / "null_odds.json").exists()


def test_a_second_run_reuses_features_and_scores_the_best_weights(squad_run):
    out = squad_run["out"]
    again = run_squad(*squad_run["flags"], "--do_eval")
    assert "reusing eval features" in again.stderr
    assert results(out / "eval_results.txt")["eval_f1"] == pytest.approx(
        results(out / "best" / "eval_results.txt")["eval_f1"], abs=1e-9)


def test_squad_2_with_impossible_questions(squad_run, tiny_checkpoint, tmp_path):
    """A v2 set made from the dev slice (each question also asked about another article's
    paragraph, marked impossible): null answers, null odds, HasAns/NoAns and the threshold
    search, all consistent with the official v2 scorer on the written files."""
    dev = load_squad(squad_run["dev"])
    extra = paragraphs(load_squad(squad_run["train"]), 0, 2)
    dev_v2 = make_v2({"version": "1.1", "data": dev["data"] + extra["data"]}, seed=3)
    path = tmp_path / "dev-v2.json"
    write_json(path, dev_v2)
    out = tmp_path / "out"
    run_squad(f"--train_file={path}", f"--predict_file={path}", f"--output_dir={out}",
              f"--init_checkpoint={tiny_checkpoint / 'bert_model.ckpt'}", "--max_seq_length=128",
              "--doc_stride=48", "--max_query_length=32", "--train_batch_size=16",
              "--num_train_epochs=1", "--learning_rate=1e-3", "--predict_batch_size=16",
              "--version_2_with_negative", "--do_train", "--do_eval", "--do_predict")
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert list(null_odds) == list(predictions) == [qa["id"] for qa in questions(dev_v2)]
    for qid, text in predictions.items():
        assert (text == "") == (null_odds[qid] > 0.0), qid  # the threshold 0.0
    final = results(out / "eval_results.txt")
    official = squad_metrics.squad_v2_scores(dev_v2["data"], predictions, null_odds)
    for name in ("exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"):
        assert final[f"eval_{name}"] == pytest.approx(official[name], abs=1e-9), name
    impossible = sum(bool(qa.get("is_impossible")) for qa in questions(dev_v2))
    assert final["eval_NoAns_total"] == impossible > 0
    assert final["eval_HasAns_total"] == len(questions(dev_v2)) - impossible


def test_usage_errors(squad_run, tmp_path):
    unanswered = load_squad(squad_run["dev"])
    for qa in questions(unanswered):
        qa["answers"] = []
    path = tmp_path / "unanswered.json"
    write_json(path, unanswered)
    flags = [f for f in squad_run["flags"] if not f.startswith(("--predict_file", "--output_dir"))]
    result = run_squad(*flags, f"--predict_file={path}", f"--output_dir={tmp_path / 'a'}",
                       "--do_eval", check=False)
    assert result.returncode != 0 and "has questions without answers" in result.stderr
    result = run_squad(*flags, f"--output_dir={tmp_path / 'b'}", "--do_predict", check=False)
    assert result.returncode != 0 and "need --predict_file" in result.stderr
    result = run_squad(*squad_run["flags"][:-1], "--do_eval", "--best_metric=eval_exact",
                       check=False)
    assert result.returncode != 0 and "eval_exact_match, eval_f1" in result.stderr


def test_litert_path_answers_as_the_runners_predictions(squad_run):
    """The export's LiteRT file (float32, made by export_litert.py) through `LiteRTReader`: the
    runner's windows and decoding, so its predictions.json answers and n-best probabilities;
    the int8 file the export wrote agrees on nearly every answer."""
    from bert_tf2.tasks.squad.litert_serving import LiteRTReader

    export = squad_run["root"] / "export"
    run_script("export_litert.py", f"--saved_model={export}", "--quantization=float32")
    dev = json.loads(squad_run["dev"].read_text())
    asked = [(qa["id"], qa["question"], paragraph["context"])
             for article in dev["data"] for paragraph in article["paragraphs"]
             for qa in paragraph["qas"]]
    predictions = json.loads((squad_run["out"] / "predictions.json").read_text())
    nbest = json.loads((squad_run["out"] / "nbest_predictions.json").read_text())
    questions, contexts = [q for _, q, _ in asked], [c for _, _, c in asked]
    float32 = LiteRTReader.load(str(export), "float32")(questions, contexts)
    assert float32["answer"] == [predictions[qid] for qid, _, _ in asked]
    for (qid, _, _), probability in zip(asked, float32["probability"]):
        assert abs(probability - nbest[qid][0]["probability"]) < 1e-4
    int8 = LiteRTReader.load(str(export))(questions, contexts)
    same = sum(a == b for a, b in zip(int8["answer"], float32["answer"]))
    assert same >= 0.9 * len(asked), (same, len(asked))


def test_the_export_served_over_http_answers_as_its_fast_path(squad_run):
    """serve.py on the export's int8 file: TF Serving's predict in rows, the answers and
    probabilities of `LiteRTReader` called directly."""
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    pytest.importorskip("tensorflow_serving", reason="tensorflow-serving-api is not installed "
                        "(make test installs it with --no-deps)")
    from conftest import free_port
    from http_server import call, grpc_predict, server

    from bert_tf2.tasks.squad.litert_serving import LiteRTReader

    export = squad_run["root"] / "export"
    dev = json.loads(squad_run["dev"].read_text())
    asked = [(qa["question"], paragraph["context"]) for article in dev["data"]
             for paragraph in article["paragraphs"] for qa in paragraph["qas"]][:12]
    expected = LiteRTReader.load(str(export), "int8")([q for q, _ in asked],
                                                      [c for _, c in asked])
    grpc_port = free_port()
    with server(export, "--runtime=int8", f"--tf_serving_grpc_port={grpc_port}") as (base, _):
        status, _, answer = call(base + "/v1/models/m:predict", {"instances": [
            {"question": q, "context": c} for q, c in asked]})
        tensors = grpc_predict(grpc_port, question=[q for q, _ in asked],
                               context=[c for _, c in asked])
    assert status == 200
    assert [p["answer"] for p in answer["predictions"]] == expected["answer"]
    assert [p["probability"] for p in answer["predictions"]] == pytest.approx(
        list(expected["probability"]), abs=1e-6)
    assert [a.decode() for a in tensors["answer"]] == expected["answer"]  # TF Serving's gRPC
    assert tensors["probability"].tolist() == pytest.approx(list(expected["probability"]),
                                                            abs=1e-6)
