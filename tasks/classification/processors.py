"""The task names `run_classifier.py --task_name` takes, and the processor each makes.

One registry for the readers of `reader.py` (GLUE, XNLI, generic TSV/CSV) and of
`multilabel_reader.py` (JSON lines); names are case-insensitive, and a processor's options are
checked against its constructor so that a misspelt option is one clear error.
"""
from __future__ import annotations

import inspect

from bert_tf2.tasks.classification.multilabel_reader import MultiLabelProcessor
from bert_tf2.tasks.classification.reader import (
    ColaProcessor,
    DataProcessor,
    GenericProcessor,
    MnliProcessor,
    MrpcProcessor,
    QnliProcessor,
    QqpProcessor,
    RteProcessor,
    Sst2Processor,
    StsbProcessor,
    WnliProcessor,
    XnliProcessor,
)

PROCESSORS = {
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "sst2": Sst2Processor,
    "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor,
    "stsb": StsbProcessor,
    "qqp": QqpProcessor,
    "mnli": MnliProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "xnli": XnliProcessor,
    "generic": GenericProcessor,
    "multilabel": MultiLabelProcessor,
}


def get_processor(task_name: str, **options) -> DataProcessor:
    """The processor for a task name (case-insensitive), built with the task's options."""
    cls = PROCESSORS.get(task_name.lower())
    if cls is None:
        raise ValueError(f"unknown task {task_name!r}; known tasks: {', '.join(PROCESSORS)}")
    accepted = [p for p in inspect.signature(cls).parameters if p != "self"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = f"options {', '.join(accepted)}" if accepted else "no options"
        raise ValueError(f"task {cls.name!r} takes {takes}; got {', '.join(unknown)}")
    return cls(**options)
