"""Build the demo's labelled set: the summary sentences of Python's own docstrings, labelled
with the part of the standard library they document (math, text, files, time, network).

The text is real and every Python carries it; the label is a fact about where the text comes
from, not a judgement. README.md beside this file gives the exact rules; this script is them.

    python examples/docstring_topics/make_data.py --output_dir examples/docstring_topics
"""
import argparse
import collections
import hashlib
import importlib
import inspect
import os
import re
import sys

# label -> the standard-library modules whose docstrings carry it ("str": the methods of str).
MODULES = {
    "math": ["math", "cmath", "statistics", "fractions", "decimal", "random", "numbers"],
    "text": ["str", "string", "re", "textwrap", "difflib", "unicodedata", "shlex", "html",
             "stringprep"],
    "files": ["os.path", "shutil", "pathlib", "glob", "fnmatch", "tempfile", "filecmp",
              "zipfile", "tarfile", "gzip", "bz2", "lzma", "fileinput"],
    "time": ["time", "datetime", "calendar", "zoneinfo", "sched"],
    "network": ["socket", "ssl", "http.client", "http.server", "http.cookies", "http.cookiejar",
                "urllib.request", "urllib.parse", "smtplib", "ftplib", "poplib", "imaplib",
                "ipaddress", "socketserver"],
}
MAX_PER_LABEL = 200  # keeps the labels within 2:1 of each other
DEV_EVERY = 5        # every 5th sentence of a label (in hash order) goes to dev
# A paragraph that is only a call signature, as C functions' docstrings start:
# "sleep(seconds)", "time() -> floating point number", "format -> strftime() style string."
SIGNATURE = re.compile(r"^[\w.]+\(.*\)( *-+>.*)?$|^[\w.]+ *-+> ")


def summary(doc: str) -> str:
    """The first sentence of the first paragraph that is not a call signature."""
    for paragraph in doc.strip().split("\n\n"):
        text = " ".join(paragraph.split())
        if text and not SIGNATURE.match(text):
            match = re.match(r"(.+?[.!?])(\s|$)", text)
            return match.group(1) if match else text
    return ""


def _defined_in(obj, module: str) -> bool:
    """Defined by this module (or its C accelerator, `_socket` for `socket`), not imported."""
    last = module.split(".")[-1]
    return getattr(obj, "__module__", None) in (module, "_" + last, "_py" + last)


def documented(module: str):
    """(qualified name, docstring) of the public functions and classes a module defines and of
    their own public methods and properties."""
    if module == "str":
        for name, obj in sorted(vars(str).items()):
            if not name.startswith("_"):
                yield f"str.{name}", getattr(str, name).__doc__  # getattr: unwrap maketrans
        return
    mod = importlib.import_module(module)
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or not (inspect.isroutine(obj) or inspect.isclass(obj)):
            continue
        if not _defined_in(obj, module):
            continue
        yield f"{module}.{name}", obj.__doc__
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if not attr.startswith("_") and (inspect.isroutine(member)
                                                 or isinstance(member, property)):
                    yield f"{module}.{name}.{attr}", getattr(obj, attr).__doc__


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build() -> dict:
    """split -> rows of (id, label, sentence), in a fixed order."""
    first = {}  # sentence -> (label, id) of its first occurrence; None when labels disagree
    for label, modules in MODULES.items():
        for module in modules:
            for name, doc in documented(module):
                sentence = summary(doc) if isinstance(doc, str) else ""
                if len(sentence.split()) < 4 or "->" in sentence:  # too short, or a signature
                    continue
                if sentence in first:
                    if first[sentence] and first[sentence][0] != label:
                        first[sentence] = None  # said of two topics: no label
                    continue
                first[sentence] = (label, name)
    by_label = collections.defaultdict(list)
    for sentence, found in first.items():
        if found:
            by_label[found[0]].append((found[1], found[0], sentence))
    splits = {"train": [], "dev": []}
    for label in MODULES:
        rows = sorted(by_label[label], key=lambda row: _hash(row[2]))[:MAX_PER_LABEL]
        for i, row in enumerate(rows):
            splits["dev" if i % DEV_EVERY == 0 else "train"].append(row)
    for rows in splits.values():
        rows.sort()
    return splits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    for split, rows in build().items():
        path = os.path.join(args.output_dir, f"{split}.tsv")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("id\tlabel\tsentence\n")
            f.writelines(f"{name}\t{label}\t{sentence}\n" for name, label, sentence in rows)
        counts = collections.Counter(label for _, label, _ in rows)
        print(f"{path}: {len(rows)} rows, " + ", ".join(
            f"{label} {counts[label]}" for label in MODULES))
    print(f"Python {sys.version.split()[0]} on {sys.platform}")


if __name__ == "__main__":
    main()
