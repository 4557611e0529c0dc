"""`DataError`: bad input data, with a message that says where the fault is.

Every reader of task files (GLUE TSV, SQuAD JSON, CoNLL columns, features files) raises it; the
message starts with 'PATH:LINE: ' (or 'PATH: ' for whole-file problems) so that users can find the
fault, and the runners print it as one line.
"""
from bert_tf2.process.errors import UserError


class DataError(UserError):
    """Bad task input; the message starts with 'PATH:LINE: ' ('PATH: ' for whole-file problems)."""


def decode_line(path: str, number: int, raw: bytes) -> str:
    """Line `number` (1-based) of `path` as UTF-8 text, or a `DataError` naming the line, the
    byte and its column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                        f"{e.start + 1}); save the file as UTF-8") from None


def not_utf8(path: str) -> DataError:
    """A `DataError` naming the first line of `path` that is not UTF-8 (a decoder reading the
    file as text only knows a byte offset in its buffer)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                decode_line(path, number, raw)
            except DataError as error:
                return error
    return DataError(f"{path}: not UTF-8 text; save the file as UTF-8")
