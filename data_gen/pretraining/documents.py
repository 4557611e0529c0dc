"""Documents from text files: lists of sentences, the unit that pretraining instances are cut from.

Four layouts (`--input_format`):

- `sentence_lines`, the original's: one sentence per line, a blank (whitespace-only) line between
  documents. As in the original, lines are split on "\\n" only and stripped of whitespace
  (`str.strip`), and a line that tokenizes to nothing is dropped later by the tokenizer step.
  Here each file also ends the document it is in; the original carried an unfinished document on
  into the next file, and `--faithful_in_memory` does the same.
- `wikitext`: WikiText's ` = Title = ` lines start a new article (document); ` = = Section = = `
  heading lines are dropped; every other non-blank line is a paragraph, split into sentences. The
  WikiText tokenization marks ` @-@ `, ` @,@ `, ` @.@ ` are joined back (`3 @.@ 1` -> `3.1`);
  `<unk>` is left as it is.
- `prose`: plain running text such as a Gutenberg book: the whole file is one document, paragraphs
  are runs of non-blank lines (wrapped lines joined by a space), each split into sentences.
- `jsonl`: JSON lines, one document per line, its text in the `"text"` field (as the shared
  Reuters files and most scraped corpora hold it); each line of the text is a paragraph, split
  into sentences. Blank lines are skipped; other fields are ignored.

Sentence splitting (`split_sentences`): whitespace runs become one space; a sentence ends after a
run of `.`, `!`, `?` or `…`, plus any closing quotes or brackets, when a space follows and the
next sentence starts (after any opening quotes or brackets, and spaces) with an upper-case letter
or a digit. A `.`
does not end a sentence after a known abbreviation (`Mr.`, `Dr.`, `St.`, `e.g.`, ...), a single
letter (an initial, `J. R. R. Tolkien`) or a word with an inner period (`U.S.`).

Bad input fails early with `InputFormatError` naming the file and line: bytes that are not UTF-8,
or a NUL byte (a binary file). An empty file, or a `sentence_lines` file without a blank line (read
as one document), is logged as a warning and otherwise handled as described.
"""
import glob
import json
import os
import re
from typing import Callable, Iterable, Iterator, NamedTuple

from absl import logging

from bert_tf2.process.errors import SettingsError, UserError


class InputFormatError(UserError):
    """Input that cannot be read as text; the message names the file and line."""


class Document(NamedTuple):
    file_index: int  # position of the file in the expanded `--input_file` list
    index: int  # position of the document in its file
    sentences: list  # non-empty stripped strings without "\n"


def expand_input_files(patterns: str) -> list:
    """Comma-separated paths or globs (matches sorted); a pattern matching nothing is an error."""
    files = []
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        if "://" in pattern:
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
        else:
            matches = sorted(path for path in glob.glob(pattern) if not os.path.isdir(path))
        if not matches:
            raise InputFormatError(f"--input_file: {pattern!r} matches no file")
        files.extend(matches)
    if not files:
        raise InputFormatError("--input_file names no file")
    return files


def file_size(path) -> int:
    path = os.fspath(path)
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.stat(path).length
    return os.path.getsize(path)


def open_binary(path):
    path = os.fspath(path)
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


# ------------------------------------------------------------------ lines
class Line(NamedTuple):
    name: str  # the file, for messages
    number: int  # 1-based
    text: str  # stripped


def decoded_lines(raw_lines: Iterable[bytes], name: str, skip_invalid_utf8: bool = False,
                  lines_before: Callable[[], int] = None) -> Iterator[Line]:
    """Stripped lines of one file, split on "\\n" only; not UTF-8 or binary -> InputFormatError.

    With `skip_invalid_utf8`, bytes that are not UTF-8 are dropped instead (what the original
    tokenizer's `convert_to_unicode` does to bytes), and the file is named in a warning.
    `lines_before` counts the file's lines before `raw_lines` when they start inside the file
    (`range_documents`); it is called only to name the line of an error.
    """
    number, skipped = 0, 0
    for number, raw in enumerate(raw_lines, start=1):
        nul = raw.find(b"\0")
        if nul >= 0:
            number += lines_before() if lines_before else 0
            raise InputFormatError(f"{name}:{number}: NUL byte at byte {nul + 1} of the line: "
                                   "this looks like a binary file, not text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if not skip_invalid_utf8:
                number += lines_before() if lines_before else 0
                raise InputFormatError(
                    f"{name}:{number}: not UTF-8 ({err.reason}: {raw[err.start:err.start + 4]!r} "
                    f"at byte {err.start + 1} of the line); convert the file to UTF-8, or pass "
                    "--skip_invalid_utf8 to drop such bytes") from None
            text, skipped = raw.decode("utf-8", "ignore"), skipped + 1
        yield Line(name, number, text.strip())
    if number == 0:
        logging.warning("%s: empty file, no documents", name)
    if skipped:
        logging.warning("%s: dropped bytes that are not UTF-8 on %d lines", name, skipped)


def file_lines(path: str, skip_invalid_utf8: bool = False) -> Iterator[Line]:
    with open_binary(path) as f:
        yield from decoded_lines(f, path, skip_invalid_utf8)


# ------------------------------------------------------------------ the three layouts
def sentence_line_documents(lines: Iterable[Line], whole_files: bool = True) -> Iterator[list]:
    """The original layout: a blank line ends a document; nothing else does.

    `whole_files=False` (a range of a file that starts after a blank line) skips the warning
    about a file without blank lines, which only a whole file can show.
    """
    document, name, text_lines, blank_lines = [], None, 0, 0
    warn = _warn_if_one_document if whole_files else _no_warning
    for line in lines:
        if line.name != name:
            warn(name, text_lines, blank_lines)
            name, text_lines, blank_lines = line.name, 0, 0
        if line.text:
            document.append(line.text)
            text_lines += 1
        else:
            blank_lines += 1
            if document:
                yield document
            document = []
    warn(name, text_lines, blank_lines)
    if document:
        yield document


def _no_warning(*_) -> None:
    pass


def _warn_if_one_document(name, text_lines: int, blank_lines: int) -> None:
    if text_lines > 1 and blank_lines == 0:
        logging.warning("%s: no blank line in %d lines, so it is read as ONE document (the "
                        "sentence_lines layout puts a blank line between documents; running text "
                        "wants --input_format=prose)", name, text_lines)


_WIKITEXT_TITLE = re.compile(r"= (?!=)(.*?)(?<!=) =")
_WIKITEXT_HEADING = re.compile(r"=(?: =)+ .* =(?: =)+")
_WIKITEXT_MARK = re.compile(r" @(.)@ ")


def wikitext_documents(lines: Iterable[Line]) -> Iterator[list]:
    """WikiText: ` = Title = ` starts an article; section headings dropped; paragraphs split."""
    document = []
    for line in lines:
        if _WIKITEXT_TITLE.fullmatch(line.text):
            if document:
                yield document
            document = []
        elif line.text and not _WIKITEXT_HEADING.fullmatch(line.text):
            document.extend(split_sentences(_WIKITEXT_MARK.sub(r"\1", line.text)))
    if document:
        yield document


def prose_documents(lines: Iterable[Line]) -> Iterator[list]:
    """Running text: the whole file is one document of paragraphs split into sentences."""
    document, paragraph = [], []
    for line in lines:
        if line.text:
            paragraph.append(line.text)
        elif paragraph:
            document.extend(split_sentences(" ".join(paragraph)))
            paragraph = []
    if paragraph:
        document.extend(split_sentences(" ".join(paragraph)))
    if document:
        yield document


def jsonl_documents(lines: Iterable[Line]) -> Iterator[list]:
    """JSON lines: each line's `"text"` one document, its lines paragraphs split into sentences."""
    for line in lines:
        if not line.text:
            continue
        try:
            text = json.loads(line.text)["text"]
        except (ValueError, TypeError, KeyError):
            text = None
        if not isinstance(text, str):
            raise InputFormatError(f'{line.name}:{line.number}: not a JSON object with a "text" '
                                   'string; --input_format=jsonl wants one {"text": ...} per line')
        document = [sentence for paragraph in text.split("\n") if paragraph.strip()
                    for sentence in split_sentences(paragraph)]
        if document:
            yield document


READERS = {
    "sentence_lines": sentence_line_documents,
    "wikitext": wikitext_documents,
    "prose": prose_documents,
    "jsonl": jsonl_documents,
}


class InputOptions(NamedTuple):
    """How to read the input files: `--input_format` and `--skip_invalid_utf8`."""
    input_format: str = "sentence_lines"
    skip_invalid_utf8: bool = False

    def check(self) -> "InputOptions":
        if self.input_format not in READERS:
            raise SettingsError(f"--input_format={self.input_format!r}: expected one of "
                             f"{', '.join(READERS)}")
        return self


def file_documents(path: str, options: InputOptions, file_index: int = 0,
                   raw_lines: Iterable[bytes] = None) -> Iterator[Document]:
    """The documents of one file (its end ends a document), read from `raw_lines` if given."""
    options.check()
    if raw_lines is None:
        lines = file_lines(path, options.skip_invalid_utf8)
    else:
        lines = decoded_lines(raw_lines, path, options.skip_invalid_utf8)
    for index, sentences in enumerate(READERS[options.input_format](lines)):
        yield Document(file_index, index, sentences)


def stream_documents(paths: list, options: InputOptions) -> Iterator[Document]:
    """Every file's documents in turn; memory holds one document at a time."""
    for file_index, path in enumerate(paths):
        yield from file_documents(path, options, file_index)


# ------------------------------------------------------------------ parts of files
class InputRange(NamedTuple):
    """Bytes `[start, end)` of one input file: whole documents, read by one worker."""
    path: str
    start: int
    end: int


def input_ranges(paths: list, options: InputOptions, range_bytes: int) -> list:
    """The input cut into ranges of about `range_bytes`, each of whole documents, in input order.

    Only local `sentence_lines` files are cut, and only right after a blank line (where the
    reader ends a document anyway), so the documents are the same however the input is cut.
    Other layouts and remote files are one range per file. Finding a cut reads from the nominal
    offset to the next blank line, not the file.
    """
    ranges = []
    for path in paths:
        size = file_size(path)
        if options.input_format != "sentence_lines" or "://" in path or size <= range_bytes:
            ranges.append(InputRange(path, 0, size))
            continue
        cuts = [0]
        with open(path, "rb") as f:
            for nominal in range(range_bytes, size, range_bytes):
                if nominal <= cuts[-1]:
                    continue
                f.seek(nominal - 1)
                f.readline()  # to the start of the first line at or after `nominal`
                for line in iter(f.readline, b""):
                    if not line.strip():  # ASCII-blank lines are blank to the reader too
                        if f.tell() < size:
                            cuts.append(f.tell())
                        break
        ranges.extend(InputRange(path, a, b) for a, b in zip(cuts, cuts[1:] + [size]))
    return ranges


def range_documents(part: InputRange, options: InputOptions) -> Iterator[list]:
    """The documents (lists of sentences) of one input range."""
    options.check()
    if part.start == 0 and options.input_format != "sentence_lines":
        yield from (d.sentences for d in file_documents(part.path, options))
        return
    with open_binary(part.path) as f:
        f.seek(part.start)
        lines = decoded_lines(_lines_until(f, part.end - part.start), part.path,
                              options.skip_invalid_utf8, lambda: _count_lines(part))
        yield from sentence_line_documents(lines, whole_files=part.start == 0)


def _lines_until(f, length: int) -> Iterator[bytes]:
    for raw in f:
        yield raw
        length -= len(raw)
        if length <= 0:
            return


def _count_lines(part: InputRange) -> int:
    """Lines of the file before the range (for the line number of an error)."""
    with open_binary(part.path) as f:
        return f.read(part.start).count(b"\n")


def original_documents(paths: list, options: InputOptions) -> Iterator[list]:
    """As the original reads them: in `sentence_lines`, a document may run on into the next file."""
    if options.check().input_format != "sentence_lines":
        yield from (document.sentences for document in stream_documents(paths, options))
        return
    yield from sentence_line_documents(
        line for path in paths for line in file_lines(path, options.skip_invalid_utf8))


# ------------------------------------------------------------------ sentences
_ABBREVIATIONS = frozenset("""
    mr mrs ms messrs dr prof rev fr sr jr st mt ft gen col lt capt sgt cmdr adm gov sen rep hon
    pres supt vol vols vs al fig figs approx ca cf eds esp inc ltd co corp dept
    jan feb mar apr jun jul aug sep sept oct nov dec
    """.split())
_CLOSERS = "\"'’”)]}»"
_OPENERS = "\"'‘“([{«"
_END = re.compile(r"[.!?…]+[" + re.escape(_CLOSERS) + r"]* ")


def split_sentences(paragraph: str) -> list:
    """The sentences of a paragraph, by the rules in the module docstring."""
    text = " ".join(paragraph.split())
    sentences, start = [], 0
    for end in _END.finditer(text):
        if _starts_sentence(text, end.end()) and not _is_abbreviation(text, end.start(),
                                                                       end.group()):
            sentences.append(text[start:end.end() - 1])
            start = end.end()
    if start < len(text):
        sentences.append(text[start:])
    return sentences


def _starts_sentence(text: str, at: int) -> bool:
    while at < len(text) and (text[at] in _OPENERS or text[at] == " "):  # WikiText: ` " Word`
        at += 1
    return at < len(text) and (text[at].isupper() or text[at].isdigit())


def _is_abbreviation(text: str, period_at: int, terminator: str) -> bool:
    if not terminator.startswith(".") or terminator.rstrip(_CLOSERS + " ") != ".":
        return False  # "!", "?", "..." always end a sentence here
    word = text[text.rfind(" ", 0, period_at) + 1:period_at].lstrip(_OPENERS)
    return (len(word) == 1 and word.isalpha()) or "." in word or word.lower() in _ABBREVIATIONS
