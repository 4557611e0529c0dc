"""SQuAD file tools: article splits, the SQuAD 2.0-style set, structure checks, the CLI."""
from __future__ import annotations

import copy
import json

import pytest

from bert_tf2.tasks.squad.files import load_squad, main, make_v2, split_articles
from bert_tf2.tasks.squad.metrics import squad_v1_scores, squad_v2_scores


def _questions(dataset_json: dict) -> list:
    return [qa for article in dataset_json["data"] for p in article["paragraphs"] for qa in p["qas"]]


def _small() -> dict:
    """Three articles; article i has i + 1 paragraphs of two questions each (12 questions)."""
    data = []
    for a in range(3):
        paragraphs = [{"context": f"context {a}.{p}",
                       "qas": [{"id": f"{a}-{p}-{q}", "question": f"question {a}.{p}.{q}?",
                                "answers": [{"text": "context", "answer_start": 0}]} for q in range(2)]}
                      for p in range(a + 1)]
        data.append({"title": f"article{a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def _source_article(dataset_json: dict) -> dict:
    return {qa["id"]: a for a, article in enumerate(dataset_json["data"])
            for p in article["paragraphs"] for qa in p["qas"]}


def _check_v2(original: dict, v2: dict, expected_impossible: int) -> None:
    source = _source_article(original)
    originals = {qa["id"]: qa for qa in _questions(original)}
    ids = [qa["id"] for qa in _questions(v2)]
    assert len(ids) == len(set(ids)) == len(originals) + expected_impossible
    assert v2["version"] == "v2.0"
    for a, article in enumerate(v2["data"]):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["is_impossible"]:
                    base = qa["id"].removesuffix("_impossible")
                    assert qa["id"] == base + "_impossible" and qa["answers"] == []
                    assert qa["question"] == originals[base]["question"]
                    assert source[base] != a   # hosted by a paragraph of another article
                else:
                    assert qa == {**originals[qa["id"]], "is_impossible": False}
                    assert source[qa["id"]] == a


def test_split_articles_small():
    dataset = _small()
    before = copy.deepcopy(dataset)
    head, tail = split_articles(dataset, 2)
    assert head == {"version": "1.1", "data": before["data"][:2]}
    assert tail == {"version": "1.1", "data": before["data"][2:]}
    # 1 paragraph + 2 paragraphs of two questions = 6 in head; 3 paragraphs = 6 in tail
    assert (len(_questions(head)), len(_questions(tail))) == (6, 6)
    head["data"][0]["title"] = "changed"
    assert dataset == before   # copies, input untouched
    with pytest.raises(ValueError, match="outside 0..3"):
        split_articles(dataset, 4)


def test_make_v2_small_doubles_and_is_deterministic():
    dataset = _small()
    before = copy.deepcopy(dataset)
    v2 = make_v2(dataset, seed=7)
    assert dataset == before
    _check_v2(dataset, v2, expected_impossible=12)
    assert make_v2(dataset, seed=7) == v2
    # share 0.25: round(12 * 0.25 / 0.75) = 4 impossible questions, 4 / 16 = 25%
    _check_v2(dataset, make_v2(dataset, seed=7, impossible_share=0.25), expected_impossible=4)
    _check_v2(dataset, make_v2(dataset, seed=7, impossible_share=0.0), expected_impossible=0)
    with pytest.raises(ValueError, match="impossible_share"):
        make_v2(dataset, impossible_share=0.6)
    with pytest.raises(ValueError, match="two articles"):
        make_v2({"version": "1.1", "data": dataset["data"][:1]})


def _write(path, obj) -> str:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return str(path)


def test_load_squad_names_the_fault(tmp_path):
    good = _small()
    assert load_squad(_write(tmp_path / "good.json", good)) == good
    with pytest.raises(ValueError, match=r"bad\.json:1: not valid JSON"):
        load_squad(_write(tmp_path / "bad.json", '{"data": ['))
    with pytest.raises(ValueError, match=r"nodata\.json: the top level lacks 'data'"):
        load_squad(_write(tmp_path / "nodata.json", {"version": "1.1"}))
    cases = [
        (lambda d: d["data"][1].pop("paragraphs"), "article 1 lacks 'paragraphs'"),
        (lambda d: d["data"][2]["paragraphs"][1].pop("context"), "article 2 paragraph 1 lacks 'context'"),
        (lambda d: d["data"][1]["paragraphs"][0].pop("qas"), "article 1 paragraph 0 lacks 'qas'"),
        (lambda d: d["data"][2]["paragraphs"][2]["qas"][1].pop("id"),
         "article 2 paragraph 2 question 1 lacks 'id'"),
        (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].pop("question"),
         "article 0 question id 0-0-1 lacks 'question'"),
        (lambda d: d["data"][1]["paragraphs"][1]["qas"][0]["answers"][0].pop("text"),
         "an answer of article 1 question id 1-1-0 lacks 'text'"),
    ]
    for n, (damage, message) in enumerate(cases):
        broken = _small()
        damage(broken)
        with pytest.raises(ValueError, match=f"case{n}.json: {message}"):
            load_squad(_write(tmp_path / f"case{n}.json", broken))


def test_cli_split_and_make_v2(tmp_path, capsys):
    source = _write(tmp_path / "in.json", _small())
    head, tail, v2 = (str(tmp_path / name) for name in ("head.json", "tail.json", "v2.json"))
    main(["split", source, "--first", "1", "--head", head, "--tail", tail])
    assert load_squad(head) == split_articles(_small(), 1)[0]
    assert load_squad(tail) == split_articles(_small(), 1)[1]
    main(["make_v2", source, v2, "--seed", "3", "--impossible_share", "0.25"])
    assert load_squad(v2) == make_v2(_small(), seed=3, impossible_share=0.25)
    assert "3 articles, 16 questions (4 impossible)" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head.json", "in.json", "tail.json", "v2.json"]
    with pytest.raises(SystemExit):
        main(["split", source, "--first", "9", "--head", head, "--tail", tail])
    assert "outside 0..3" in capsys.readouterr().err
    broken = _write(tmp_path / "broken.json", {"data": [{}]})
    with pytest.raises(SystemExit):
        main(["make_v2", broken, v2])
    assert "broken.json: article 0 lacks 'paragraphs'" in capsys.readouterr().err


def test_real_dev_v1_split_and_v2(shared_data):
    path = shared_data / "squad" / "dev-v1.1.json"
    dataset = load_squad(path)
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    assert len(dataset["data"]) == 48
    head, tail = split_articles(dataset, 38)
    assert (len(head["data"]), len(tail["data"])) == (38, 10)
    assert head["version"] == tail["version"] == "1.1"
    head_count = sum(len(p["qas"]) for article in raw["data"][:38] for p in article["paragraphs"])
    tail_count = sum(len(p["qas"]) for article in raw["data"][38:] for p in article["paragraphs"])
    assert (len(_questions(head)), len(_questions(tail))) == (head_count, tail_count) == (8582, 1988)
    assert head_count + tail_count == 10570
    assert head["data"][0]["title"] == "Super_Bowl_50" and tail["data"][0] == raw["data"][38]

    v2 = make_v2(dataset, seed=12345)
    _check_v2(dataset, v2, expected_impossible=10570)
    assert make_v2(dataset, seed=12345) == v2 and make_v2(dataset, seed=1) != v2
    predictions = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "") for qa in _questions(v2)}
    scores = squad_v2_scores(v2["data"], predictions)
    assert scores == {"exact": 100.0, "f1": 100.0, "total": 21140,
                      "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 10570,
                      "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 10570}
    # answering the impossible questions with the source question's gold loses all NoAns points
    answered = {qid: text or predictions[qid.removesuffix("_impossible")] for qid, text in predictions.items()}
    assert squad_v2_scores(v2["data"], answered)["NoAns_exact"] == 0.0
    # the split parts are still scorable v1 files
    assert squad_v1_scores(tail["data"], {qa["id"]: qa["answers"][0]["text"] for qa in _questions(tail)})[
        "total"] == 1988
