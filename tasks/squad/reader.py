"""SQuAD v1.1/v2.0 JSON -> `SquadExample`s, as the original `read_squad_examples`.

Each context is split into words on the original's whitespace (space, tab, CR, LF, U+202F),
keeping `char_to_word_offset`; a training answer's character span becomes a word span, and an
answer whose words do not contain its text (odd Unicode) is skipped with a warning, as the
original does. Where the original refused a training question with more than one answer, the first
answer is used (SQuAD's dev files, which we split to train on here, list up to three). The file's
structure is checked first (`files.load_squad`), so a bad file fails with its name and the place
of the fault.
"""
from __future__ import annotations

import dataclasses
import logging

from bert_tf2.data_gen.errors import DataError
from bert_tf2.tasks.squad.files import load_squad

logger = logging.getLogger(__name__)

WHITESPACE = frozenset(" \t\r\n\u202f")


@dataclasses.dataclass
class SquadExample:
    qas_id: str
    question_text: str
    doc_tokens: list  # the context's whitespace words (shared by the paragraph's questions)
    orig_answer_text: str | None = None
    start_position: int | None = None  # word indexes of the answer (training)
    end_position: int | None = None
    is_impossible: bool = False


def whitespace_words(text: str) -> tuple[list, list]:
    """`(words, char_to_word_offset)`: the original's split, and each character's word index
    (whitespace belongs to the word before it; -1 before the first word)."""
    words, offsets = [], []
    previous_is_space = True
    for char in text:
        if char in WHITESPACE:
            previous_is_space = True
        else:
            if previous_is_space:
                words.append(char)
            else:
                words[-1] += char
            previous_is_space = False
        offsets.append(len(words) - 1)
    return words, offsets


def read_squad_examples(path: str, is_training: bool, version_2: bool = False) -> list:
    """Every question of a SQuAD file, in file order (training: those whose answer is found)."""
    data = load_squad(path)["data"]
    examples, skipped, several = [], 0, 0
    seen = {}  # question id -> where it was first asked (prediction files are keyed by id)
    for entry in data:
        for number, paragraph in enumerate(entry["paragraphs"], 1):
            words, char_to_word = whitespace_words(paragraph["context"])
            for qa in paragraph["qas"]:
                where = f"article {entry.get('title', '?')!r}, paragraph {number}"
                if not is_training and str(qa["id"]) in seen:
                    raise DataError(f"{path}: question id {qa['id']!r} is used twice ("
                                    f"{seen[str(qa['id'])]}, and {where}): predictions.json is "
                                    f"keyed by id, so each question needs its own")
                seen.setdefault(str(qa["id"]), where)
                example = SquadExample(qas_id=str(qa["id"]), question_text=qa["question"],
                                       doc_tokens=words)
                if is_training:
                    example.is_impossible = bool(qa.get("is_impossible", False)) and version_2
                    if example.is_impossible:
                        example.start_position = example.end_position = -1
                        example.orig_answer_text = ""
                    else:
                        answers = qa.get("answers") or []
                        if not answers:
                            raise DataError(f"{path}: question {qa['id']}: no answer to train on "
                                            f"(an impossible question needs "
                                            f"--version_2_with_negative and is_impossible)")
                        several += len(answers) > 1
                        if not _locate_answer(example, answers[0], char_to_word, path, qa["id"]):
                            skipped += 1
                            continue
                examples.append(example)
    if skipped:
        logger.warning("%s: skipped %d training question(s) whose answer text is not in the "
                       "context's words", path, skipped)
    if several:
        logger.info("%s: %d training question(s) list several answers; the first is used",
                    path, several)
    return examples


def _locate_answer(example: SquadExample, answer: dict, char_to_word: list, path: str,
                   qas_id) -> bool:
    text, offset = answer.get("text"), answer.get("answer_start")
    if not isinstance(text, str) or not isinstance(offset, int) or not text:
        raise DataError(f"{path}: question {qas_id}: an answer needs a non-empty 'text' and an "
                        f"integer 'answer_start'")
    if offset < 0 or offset + len(text) > len(char_to_word):
        raise DataError(f"{path}: question {qas_id}: answer_start {offset} + {len(text)} "
                        f"characters runs outside the {len(char_to_word)}-character context")
    start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
    actual = " ".join(example.doc_tokens[max(start, 0):end + 1])
    cleaned = " ".join(text.split())
    if start < 0 or actual.find(cleaned) == -1:
        logger.warning("%s: question %s: could not find answer %r in %r", path, qas_id,
                       cleaned, actual)
        return False
    example.orig_answer_text, example.start_position, example.end_position = text, start, end
    return True
