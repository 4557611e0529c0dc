"""CSV and TSV rows for the task readers, with no limit on a field's length.

Python's csv module refuses a field over 131,072 characters ("field larger than field limit"), a
limit of the module, not of any task: a whole long document in one cell (which `--doc_stride`
reads in windows, and truncation cuts) is a normal input. `reader` lifts the limit for the
process (it is global to the csv module) and returns the csv module's reader.
"""
import csv
import sys


def reader(lines, **dialect):
    """`csv.reader(lines, **dialect)` that takes fields of any length."""
    if csv.field_size_limit() < sys.maxsize:
        try:
            csv.field_size_limit(sys.maxsize)
        except OverflowError:  # a C long of 32 bits
            csv.field_size_limit(2**31 - 1)
    return csv.reader(lines, **dialect)
