"""Prepare SQuAD-format JSON files for the project's runs: article splits and a SQuAD 2.0-style set.

Only dev-v1.1.json is at hand, so fine-tuning trains on its first 38 articles and evaluates on the
other 10 (`split`), and the v2.0 code path (no-answer questions, null score, threshold search) is
exercised on a set made from it (`make_v2`). `load_squad` checks a file's structure up front, so a
bad file fails with its name and the place of the fault instead of a KeyError deep in a reader.

    python -m bert_tf2.tasks.squad.files split dev-v1.1.json --first 38 --head train.json --tail eval.json
    python -m bert_tf2.tasks.squad.files make_v2 eval.json eval-v2.json --seed 12345
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
from typing import Sequence

from bert_tf2.data_gen.errors import DataError, not_utf8
from bert_tf2.process.atomic_files import write_text


def load_squad(path: str | os.PathLike) -> dict:
    """Read a SQuAD JSON file, raising `DataError` (naming the file and the place) if malformed."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            dataset = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") \
            from None
    except UnicodeDecodeError:
        raise not_utf8(path) from None

    def need(obj, key: str, kind: type, where: str):
        if not isinstance(obj, dict) or not isinstance(obj.get(key), kind):
            raise DataError(f"{path}: {where} lacks {key!r} (a {kind.__name__})")
        return obj[key]

    for a, article in enumerate(need(dataset, "data", list, "the top level")):
        for p, paragraph in enumerate(need(article, "paragraphs", list, f"article {a}")):
            need(paragraph, "context", str, f"article {a} paragraph {p}")
            for q, qa in enumerate(need(paragraph, "qas", list, f"article {a} paragraph {p}")):
                qid = need(qa, "id", str, f"article {a} paragraph {p} question {q}")
                need(qa, "question", str, f"article {a} question id {qid}")
                if "answers" in qa:
                    answers = need(qa, "answers", list, f"article {a} question id {qid}")
                    for answer in answers:
                        need(answer, "text", str, f"an answer of article {a} question id {qid}")
    return dataset


def split_articles(dataset_json: dict, first: int) -> tuple[dict, dict]:
    """The first `first` articles and the rest, as two files of the same format (copies)."""
    articles = dataset_json["data"]
    if not 0 <= first <= len(articles):
        raise ValueError(f"first={first} is outside 0..{len(articles)} (the number of articles)")
    top = {key: value for key, value in dataset_json.items() if key != "data"}
    return ({**copy.deepcopy(top), "data": copy.deepcopy(articles[:first])},
            {**copy.deepcopy(top), "data": copy.deepcopy(articles[first:])})


def make_v2(dataset_json: dict, seed: int = 12345, impossible_share: float = 0.5) -> dict:
    """A SQuAD 2.0-format set built from a v1.1 set, deterministic for a seed.

    Every original question is kept with its answers and `is_impossible: false`. Unanswerable
    questions are added so that they make up `impossible_share` (0 to 0.5) of the result: the
    round(n * share / (1 - share)) questions to copy are drawn without replacement from the n
    originals with `random.Random(seed)` (all of them at 0.5, which doubles the set). Each copy keeps
    its question text, gets id `<original id>_impossible`, `answers: []`, `is_impossible: true`
    and no `plausible_answers`, and is appended (in file order of the originals) to the `qas` of a
    paragraph drawn uniformly, with the same generator, from all paragraphs of the OTHER articles.
    A paragraph about another topic almost never answers the question, which is what makes it a
    no-answer question. The input is not modified; `version` becomes "v2.0".
    """
    if not 0.0 <= impossible_share <= 0.5:
        raise ValueError(f"impossible_share={impossible_share} must be within [0, 0.5]")
    result = copy.deepcopy(dataset_json)
    result["version"] = "v2.0"
    articles = result["data"]
    if len(articles) < 2:
        raise ValueError("make_v2 needs at least two articles (contexts come from another article)")
    sources = []  # (article index, question) in file order
    for a, article in enumerate(articles):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["is_impossible"] = False
                sources.append((a, qa))
    ids = {qa["id"] for _, qa in sources}
    if len(ids) != len(sources):
        raise ValueError("question ids of the input are not unique")
    paragraphs = [(a, paragraph) for a, article in enumerate(articles) for paragraph in article["paragraphs"]]
    rng = random.Random(seed)
    count = round(len(sources) * impossible_share / (1.0 - impossible_share))
    chosen = sorted(rng.sample(range(len(sources)), count))
    hosts_of: dict[int, list] = {}
    for index in chosen:
        a, qa = sources[index]
        if a not in hosts_of:
            hosts_of[a] = [paragraph for b, paragraph in paragraphs if b != a]
            if not hosts_of[a]:
                raise ValueError(f"no paragraph outside article {a} to host its impossible questions")
        new_id = f"{qa['id']}_impossible"
        if new_id in ids:
            raise ValueError(f"id {new_id} already exists in the input")
        ids.add(new_id)
        rng.choice(hosts_of[a])["qas"].append(
            {"id": new_id, "question": qa["question"], "answers": [], "is_impossible": True})
    return result


def write_json(path: str | os.PathLike, obj: dict) -> None:
    """Write JSON atomically: a reader sees the old file or the whole new one, never a partial one."""
    write_text(path, json.dumps(obj))


def _count(dataset_json: dict) -> str:
    qas = [qa for article in dataset_json["data"] for p in article["paragraphs"] for qa in p["qas"]]
    impossible = sum(1 for qa in qas if qa.get("is_impossible"))
    return f"{len(dataset_json['data'])} articles, {len(qas)} questions ({impossible} impossible)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bert_tf2.tasks.squad.files", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    split = commands.add_parser("split", help="first N articles to --head, the rest to --tail")
    split.add_argument("input")
    split.add_argument("--first", type=int, required=True)
    split.add_argument("--head", required=True)
    split.add_argument("--tail", required=True)
    v2 = commands.add_parser("make_v2", help="a SQuAD 2.0-format set with no-answer questions")
    v2.add_argument("input")
    v2.add_argument("output")
    v2.add_argument("--seed", type=int, default=12345)
    v2.add_argument("--impossible_share", type=float, default=0.5)
    args = parser.parse_args(argv)
    try:
        dataset = load_squad(args.input)
        if args.command == "split":
            head, tail = split_articles(dataset, args.first)
            outputs = [(args.head, head), (args.tail, tail)]
        else:
            outputs = [(args.output, make_v2(dataset, args.seed, args.impossible_share))]
    except (OSError, ValueError) as e:
        parser.error(str(e))
    for path, obj in outputs:
        write_json(path, obj)
        print(f"wrote {path}: {_count(obj)}")


if __name__ == "__main__":
    main()
