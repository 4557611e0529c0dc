"""Task features converted once and reused: a TFRecord file plus a fingerprint of what made it.

Tokenising a data set is the slow, deterministic part of a fine-tuning run's start. The runners
write each split's features to `OUTPUT_DIR/NAME.tf_record` and beside it `NAME.tf_record.json`,
holding a fingerprint of every input that decides the features: the content of the task files and
of the vocabulary, and the conversion settings (`max_seq_length`, casing, label list, ...). A later
run reuses the file only when its fingerprint is the same, and rebuilds it otherwise (saying why).
The records are written under a temporary name and renamed when complete, the fingerprint last, so
an interrupted conversion is never mistaken for a finished one.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Callable, Iterable

from bert_tf2.data_gen.records import ShardedRecordWriter
from bert_tf2.process import fault_points
from bert_tf2.process.atomic_files import write_text

logger = logging.getLogger(__name__)

# Bump when the conversion itself changes, so that old caches are rebuilt.
FORMAT_VERSION = 1


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(files: Iterable[str], **settings) -> dict:
    """What decides the features: each input file's SHA-256 and the JSON-able settings."""
    return {"format_version": FORMAT_VERSION,
            "files": {os.path.abspath(path): file_digest(path) for path in files},
            "settings": json.loads(json.dumps(settings, sort_keys=True))}


def cached_records(path: str, key: dict, make_records: Callable[[], Iterable[bytes]],
                   what: str = "features") -> int:
    """Write `make_records()` to `path` unless a file made from the same `key` is there.

    Returns the number of records in the file.
    """
    meta_path = path + ".json"
    previous = _read_meta(meta_path)
    if previous is not None and os.path.isfile(path):
        if previous.get("key") == key:
            logger.info("reusing %s in %s (%d records)", what, path, previous["num_records"])
            return previous["num_records"]
        logger.info("rebuilding %s in %s: %s changed", what, path,
                    _difference(previous["key"], key))
    if os.path.exists(meta_path):
        os.remove(meta_path)  # the records are about to change: the old fingerprint is void
    with ShardedRecordWriter([path]) as writer:
        for record in make_records():
            writer.write(record)
            if writer.written == 1:
                fault_points.reached("features")
    write_text(meta_path, json.dumps({"key": key, "num_records": writer.written},
                                                indent=1, sort_keys=True))
    logger.info("wrote %d records of %s to %s", writer.written, what, path)
    return writer.written


def _read_meta(meta_path: str) -> dict | None:
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and "key" in meta and "num_records" in meta else None


def _difference(old: dict, new: dict) -> str:
    if old.get("format_version") != new.get("format_version"):
        return "the feature format"
    changed = [os.path.basename(p) for p in set(old.get("files", {})) | set(new["files"])
               if old.get("files", {}).get(p) != new["files"].get(p)]
    changed += [k for k in set(old.get("settings", {})) | set(new["settings"])
                if old.get("settings", {}).get(k) != new["settings"].get(k)]
    return ", ".join(sorted(changed)) or "the fingerprint"
