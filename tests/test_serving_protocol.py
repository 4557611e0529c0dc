"""TF Serving's REST formats (model_server/protocol.py) and the dynamic batcher
(model_server/batching.py), without a server: rows and columns parse to the same rows, every
malformed body is one line naming the instance or input, answers take TF Serving's shapes; the
batcher runs rows that arrive together as one call, in order, refuses overflow at once and
finishes what is queued when it stops."""
import asyncio
import base64
import threading
import time

import numpy as np
import pytest

from bert_tf2.model_server import protocol
from bert_tf2.model_server.batching import DynamicBatcher, NotServing, Overloaded

PAIR = ["text_a", "text_b"]
PAIR_LISTS = {"text_a": False, "text_b": False}


def test_rows_and_columns_give_the_same_rows():
    rows, columnar = protocol.parse_predict(
        {"instances": [{"text_a": "a1", "text_b": "b1"}, {"text_a": "a2", "text_b": "b2"}]},
        PAIR, PAIR_LISTS)
    assert not columnar and rows == [{"text_a": "a1", "text_b": "b1"},
                                     {"text_a": "a2", "text_b": "b2"}]
    same, columnar = protocol.parse_predict(
        {"inputs": {"text_a": ["a1", "a2"], "text_b": ["b1", "b2"]}}, PAIR, PAIR_LISTS)
    assert columnar and same == rows
    # One input: bare texts in both formats; b64 holds UTF-8 bytes, as TF Serving takes them.
    encoded = base64.b64encode("Ünïcode".encode()).decode()
    single = protocol.parse_predict({"instances": ["x", {"b64": encoded}]}, ["text_a"],
                                    {"text_a": False})
    assert single == ([{"text_a": "x"}, {"text_a": "Ünïcode"}], False)
    assert protocol.parse_predict({"inputs": "x"}, ["text_a"], {"text_a": False}) == (
        [{"text_a": "x"}], True)
    choices = protocol.parse_predict(
        {"instances": [{"context": "c", "question": "q", "choices": ["1", "2", "3"]}]},
        ["choices", "context", "question"], {"choices": True, "context": False,
                                             "question": False})
    assert choices[0] == [{"context": "c", "question": "q", "choices": ["1", "2", "3"]}]


@pytest.mark.parametrize("body, message", [
    ([1, 2], "the body must be a JSON object with \"instances\" or \"inputs\", not [1, 2]"),
    ({}, "the body needs one of \"instances\" (rows) or \"inputs\" (columns)"),
    ({"instances": [], "inputs": {}}, "the body needs one of"),
    ({"instances": {"text_a": "x"}}, "\"instances\" must be a list, not {\"text_a\": \"x\"}"),
    ({"instances": [{"text_a": "x"}]}, "instances[0]: no text_b (the signature takes text_a, "
     "text_b)"),
    ({"instances": [{"text_a": "x", "text_b": "y", "text_c": "z"}]},
     "instances[0]: unknown input text_c (the signature takes text_a, text_b)"),
    ({"instances": [{"text_a": "x", "text_b": "y"}, {"text_a": 5, "text_b": "y"}]},
     "instances[1].text_a must be text (a JSON string), not 5"),
    ({"instances": ["x"]}, "instances[0] must be an object with text_a, text_b, not \"x\""),
    ({"inputs": {"text_a": ["x", "y"], "text_b": ["z"]}},
     "the inputs have different numbers of rows: text_a 2, text_b 1"),
    ({"inputs": {"text_a": ["x"], "text_b": [None]}},
     "inputs[0].text_b must be text (a JSON string), not null"),
    ({"instances": [{"text_a": {"b64": "%%%"}, "text_b": "y"}]},
     "instances[0].text_a: \"b64\" must hold base64 of UTF-8 text"),
    ({"instances": [{"text_a": {"b64": base64.b64encode(b"\xff\xfe").decode()},
                     "text_b": "y"}]}, "instances[0].text_a: \"b64\" must hold base64 of UTF-8"),
    ({"signature_name": "serve_token_ids", "instances": []},
     "signature_name \"serve_token_ids\": this model serves serving_default or serve_text"),
])
def test_every_malformed_body_is_one_line_naming_what_is_wrong(body, message):
    with pytest.raises(protocol.RequestError) as refused:
        protocol.parse_predict(body, PAIR, PAIR_LISTS)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_answers_take_tf_servings_shapes():
    outputs = {"label": np.array([b"yes", b"no"], dtype=object),
               "probabilities": np.array([[0.25, 0.75], [0.5, 0.5]], np.float32),
               "label_id": np.array([1, 0], np.int32)}
    assert protocol.predict_response(outputs, columnar=False) == {"predictions": [
        {"label": "yes", "label_id": 1, "probabilities": [0.25, 0.75]},
        {"label": "no", "label_id": 0, "probabilities": [0.5, 0.5]}]}
    assert protocol.predict_response(outputs, columnar=True) == {"outputs": {
        "label": ["yes", "no"], "label_id": [1, 0],
        "probabilities": [[0.25, 0.75], [0.5, 0.5]]}}
    assert protocol.status_response("AVAILABLE") == {"model_version_status": [{
        "version": "1", "state": "AVAILABLE", "status": {"error_code": "OK",
                                                          "error_message": ""}}]}
    meta = protocol.metadata_response("m", PAIR, PAIR_LISTS, {k: v[0] for k, v in
                                                              outputs.items()})
    signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["inputs"]["text_b"]["dtype"] == "DT_STRING"
    assert signature["outputs"]["probabilities"] == {
        "dtype": "DT_FLOAT", "name": "probabilities", "tensor_shape": {
            "dim": [{"size": "-1", "name": ""}, {"size": "2", "name": ""}],
            "unknown_rank": False}}
    assert signature["outputs"]["label_id"]["dtype"] == "DT_INT32"
    # A tagger's outputs are ragged lists per text.
    tagged = {"words": [["EU", "rejects"], []], "tags": [["B-ORG", "O"], []],
              "num_words": np.array([2, 0], np.int32)}
    assert protocol.predict_response(tagged, columnar=False) == {"predictions": [
        {"num_words": 2, "tags": ["B-ORG", "O"], "words": ["EU", "rejects"]},
        {"num_words": 0, "tags": [], "words": []}]}


class Recorder:
    """A model that records the rows of each call and answers each row's length."""

    def __init__(self, delay_s=0.0):
        self.calls, self.delay_s, self.gate = [], delay_s, threading.Event()
        self.gate.set()

    def __call__(self, rows):
        self.gate.wait()
        self.calls.append([row["text_a"] for row in rows])
        time.sleep(self.delay_s)
        return {"length": np.array([len(row["text_a"]) for row in rows]),
                "echo": [row["text_a"] for row in rows]}


def rows_of(*texts):
    return [{"text_a": text} for text in texts]


def test_rows_that_arrive_together_run_together_and_come_back_in_order():
    model = Recorder()
    batcher = DynamicBatcher(model, max_batch_size=8, batch_timeout_micros=200_000)
    batcher.start_accepting()

    async def clients():
        return await asyncio.gather(*[batcher.predict(rows_of(f"r{i}" + "x" * i, f"s{i}"))
                                      for i in range(4)])

    answers = asyncio.run(clients())
    assert len(model.calls) == 1 and len(model.calls[0]) == 8  # one batch of the 4 requests
    for i, answer in enumerate(answers):
        assert answer["echo"] == [f"r{i}" + "x" * i, f"s{i}"]
        assert answer["length"].tolist() == [2 + i, 2]
    assert batcher.stop(5)


def test_a_full_queue_is_refused_at_once_and_stop_finishes_what_is_queued():
    model = Recorder()
    model.gate.clear()  # the model holds its first batch until released
    batcher = DynamicBatcher(model, max_batch_size=2, batch_timeout_micros=0,
                             max_enqueued_batches=2)
    with pytest.raises(NotServing):
        asyncio.run(batcher.predict(rows_of("early")))
    batcher.start_accepting()

    async def scenario():
        running = asyncio.ensure_future(batcher.predict(rows_of("a", "b")))
        await asyncio.sleep(0.2)  # taken by the model, which waits at its gate
        queued = [asyncio.ensure_future(batcher.predict(rows_of(f"q{i}"))) for i in range(4)]
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        with pytest.raises(Overloaded, match="4 rows are waiting"):
            await batcher.predict(rows_of("one too many"))
        refused_in = time.perf_counter() - start
        stopper = asyncio.get_running_loop().run_in_executor(None, batcher.stop, 10)
        await asyncio.sleep(0.1)
        with pytest.raises(NotServing):
            await batcher.predict(rows_of("after stop"))
        model.gate.set()
        answers = await asyncio.gather(running, *queued)
        return refused_in, answers, await stopper

    refused_in, answers, drained = asyncio.run(scenario())
    assert refused_in < 0.05 and drained
    assert [a["echo"] for a in answers] == [["a", "b"], ["q0"], ["q1"], ["q2"], ["q3"]]
    assert sorted(len(call) for call in model.calls) == [2, 2, 2]


def test_a_call_of_its_own_runs_alone_on_the_models_thread_and_counts_against_the_queue():
    """`run_alone` (serve_token_ids' requests): the call runs on the batcher's thread, never in
    a batch with rows of texts that arrive beside it, and its rows count against the queue."""
    import threading

    model = Recorder()
    model.gate.clear()
    batcher = DynamicBatcher(model, max_batch_size=4, batch_timeout_micros=0,
                             max_enqueued_batches=2)
    batcher.start_accepting()
    threads = []

    def alone():
        threads.append(threading.current_thread().name)
        return {"ids": np.arange(3)}

    async def scenario():
        first = asyncio.ensure_future(batcher.predict(rows_of("a")))
        await asyncio.sleep(0.2)  # taken by the model, which waits at its gate
        before = asyncio.ensure_future(batcher.predict(rows_of("b")))
        call = asyncio.ensure_future(batcher.run_alone(alone, 3))
        after = asyncio.ensure_future(batcher.predict(rows_of("d")))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded, match="5 rows are waiting"):  # b, the call's 3, d
            await batcher.predict(rows_of("c", "c", "c", "c"))
        model.gate.set()
        return await asyncio.gather(first, before, call, after)

    (first, before, called, after) = asyncio.run(scenario())
    assert called["ids"].tolist() == [0, 1, 2] and threads == ["batch-0"]
    assert model.calls == [["a"], ["b"], ["d"]]  # "b" and "d" were not batched across the call
    assert (first["echo"], before["echo"], after["echo"]) == (["a"], ["b"], ["d"])
    assert batcher.stop(5)


def test_a_failing_model_fails_its_batch_only():
    calls = []

    def model(rows):
        calls.append(len(rows))
        if any(row["text_a"] == "boom" for row in rows):
            raise RuntimeError("boom")
        return {"echo": [row["text_a"] for row in rows]}

    batcher = DynamicBatcher(model, max_batch_size=4)
    batcher.start_accepting()

    async def scenario():
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.predict(rows_of("boom"))
        return await batcher.predict(rows_of("fine"))

    assert asyncio.run(scenario()) == {"echo": ["fine"]}
    assert batcher.stop(5)
