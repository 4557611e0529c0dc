"""`DataError`: bad input data, with a message that says where the fault is.

Every reader of task files (GLUE TSV, SQuAD JSON, CoNLL columns, features files) raises it; the
message starts with 'PATH:LINE: ' (or 'PATH: ' for whole-file problems) so that users can find the
fault, and the runners print it as one line.
"""


class DataError(ValueError):
    """Bad task input; the message starts with 'PATH:LINE: ' ('PATH: ' for whole-file problems)."""
