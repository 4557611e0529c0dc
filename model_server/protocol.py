"""TF Serving's REST API in JSON: a predict request's texts as rows, and the answers, status and
metadata in TF Serving's own shapes, so that a client written for TF Serving works unchanged.

A predict body is either the row format, `{"instances": [...]}` (each instance an object keyed by
the signature's inputs, or a bare text where the signature has one input), or the columnar
format, `{"inputs": {...}}` (each input a list over the batch, or a bare list where there is one
input). A text is a JSON string, or `{"b64": "..."}` holding its UTF-8 bytes, as TF Serving
takes binary strings; an input of a list per row (multiple choice's `choices`) takes a list of
texts. The answer mirrors the request: `{"predictions": [{output: value, ...}, ...]}` for rows,
`{"outputs": {output: [...]}}` for columns. Every mistake is `RequestError`: one line saying which
instance or input is wrong and what is expected, answered as TF Serving answers it, 400 with
`{"error": "..."}`.
"""
from __future__ import annotations

import base64
import binascii
import json

import numpy as np

from bert_tf2.inference.runtime import jsonable

SIGNATURES = ("serving_default", "serve_text")  # the raw-text signature, under both names
VERSION = "1"  # the one version a server serves, as TF Serving numbers them
TOO_DEEP = "the body is not JSON this server reads: nested deeper than 1,000 levels"


class RequestError(ValueError):
    """A request the server cannot answer as given (HTTP 400), in one line."""


def _text(value, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise RequestError(f"{where}: \"b64\" must hold base64 of UTF-8 text") from None
    raise RequestError(f"{where} must be text (a JSON string), not {_short(value)}")


def _texts(value, where: str) -> list:
    if not isinstance(value, list):
        raise RequestError(f"{where} must be a list of texts, not {_short(value)}")
    return [_text(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _short(value) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (RecursionError, ValueError):
        text = f"a nested {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def parse_json(body: bytes):
    """A request body as JSON, whatever its Content-Type says (TF Serving reads any)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"the body is not UTF-8 (byte {e.start}: {e.reason}); send "
                           f"texts as JSON strings, or their bytes as {{\"b64\": ...}}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise RequestError(f"the body is not JSON ({e})") from None
    except RecursionError:  # orjson stops at 1024 levels, and json.loads runs out of stack
        raise RequestError(TOO_DEEP) from None


def parse_predict(body, inputs: list, takes_list: dict) -> tuple:
    """`(rows, columnar)`: the request's rows, each `{input: text or list of texts}`, and
    whether it came in the columnar format. `inputs`: the signature's input names."""
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object with \"instances\" or \"inputs\", "
                           f"not {_short(body)}")
    signature = body.get("signature_name", SIGNATURES[0])
    if signature not in SIGNATURES:
        raise RequestError(f"signature_name {_short(signature)}: this model serves "
                           f"{' or '.join(SIGNATURES)}")
    if ("instances" in body) == ("inputs" in body):
        raise RequestError("the body needs one of \"instances\" (rows) or \"inputs\" (columns)")
    read = {name: (_texts if takes_list[name] else _text) for name in inputs}
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list):
            raise RequestError(f"\"instances\" must be a list, not {_short(instances)}")
        rows = []
        for i, instance in enumerate(instances):
            if len(inputs) == 1 and (not isinstance(instance, dict) or set(instance) == {"b64"}):
                instance = {inputs[0]: instance}
            if not isinstance(instance, dict):
                raise RequestError(f"instances[{i}] must be an object with "
                                   f"{', '.join(inputs)}, not {_short(instance)}")
            rows.append(_row(instance, inputs, read, f"instances[{i}]"))
        return rows, False
    columns = body["inputs"]
    if len(inputs) == 1 and (not isinstance(columns, dict) or set(columns) == {"b64"}):
        columns = {inputs[0]: columns}
    if not isinstance(columns, dict):
        raise RequestError(f"\"inputs\" must be an object with {', '.join(inputs)}, not "
                           f"{_short(columns)}")
    _check_names(columns, inputs, "\"inputs\"")
    lengths = set()
    for name in inputs:
        if not isinstance(columns[name], list):
            if takes_list[name]:
                raise RequestError(f"inputs.{name} must be a list (one list of texts per row)")
            columns[name] = [columns[name]]  # one row given as a bare value
        lengths.add(len(columns[name]))
    if len(lengths) > 1:
        raise RequestError("the inputs have different numbers of rows: " + ", ".join(
            f"{name} {len(columns[name])}" for name in inputs))
    count = lengths.pop()
    rows = [_row({name: columns[name][i] for name in inputs}, inputs, read,
                 f"inputs[{i}]") for i in range(count)]
    return rows, True


def _check_names(given: dict, inputs: list, where: str) -> None:
    missing = [name for name in inputs if name not in given]
    unknown = sorted(set(given) - set(inputs))
    if missing or unknown:
        wrong = (f"no {', '.join(missing)}" if missing else
                 f"unknown input {', '.join(unknown)}")
        raise RequestError(f"{where}: {wrong} (the signature takes {', '.join(inputs)})")


def _row(instance: dict, inputs: list, read: dict, where: str) -> dict:
    _check_names(instance, inputs, where)
    return {name: read[name](instance[name], f"{where}.{name}") for name in inputs}


def predict_response(outputs: dict, columnar: bool) -> dict:
    """TF Serving's answer to a request: `outputs` (name -> array over the request's rows)."""
    names = sorted(outputs)
    if columnar:
        return {"outputs": {name: jsonable(outputs[name]) for name in names}}
    columns = {name: jsonable(outputs[name]) for name in names}
    count = len(columns[names[0]]) if names else 0
    return {"predictions": [{name: columns[name][i] for name in names} for i in range(count)]}


def status_response(state: str, version: str = VERSION) -> dict:
    """`GET /v1/models/NAME`: TF Serving's `model_version_status` (`AVAILABLE` once warm)."""
    return {"model_version_status": [{"version": version, "state": state, "status": {
        "error_code": "OK", "error_message": ""}}]}


_DTYPES = {"f": "DT_FLOAT", "i": "DT_INT32", "u": "DT_INT32", "b": "DT_BOOL", "S": "DT_STRING",
           "O": "DT_STRING", "U": "DT_STRING"}


def tensor_info(name: str, example) -> dict:
    """A signature entry as TF Serving's metadata writes it, from one row's example output."""
    value = np.asarray(example)
    dims = [{"size": "-1", "name": ""}] + [{"size": str(n), "name": ""} for n in value.shape]
    return {"dtype": _DTYPES.get(value.dtype.kind, "DT_INVALID"),
            "tensor_shape": {"dim": dims, "unknown_rank": False}, "name": name}


def metadata_response(model_name: str, inputs: list, takes_list: dict, example_outputs: dict,
                      version: str = VERSION) -> dict:
    """`GET /v1/models/NAME/metadata` of an export without `saved_model.pb` (LiteRT files alone;
    with one, the route answers its signatures, `signature_defs`): the text signature's inputs and
    outputs, under both of its names. `example_outputs`: one row's outputs (their dtypes and
    per-row shapes)."""
    signature = {
        "inputs": {name: tensor_info(name, [""] if takes_list[name] else "")
                   for name in inputs},
        "outputs": {name: tensor_info(name, value) for name, value in example_outputs.items()},
        "method_name": "tensorflow/serving/predict", "defaults": {}}
    return {"model_spec": {"name": model_name, "signature_name": "", "version": version},
            "metadata": {"signature_def": {"signature_def": {
                name: signature for name in SIGNATURES}}}}


# ---------------------------------------------------------------- the Open Inference Protocol (V2)
_V2_DATATYPES = {"f": "FP32", "i": "INT32", "u": "INT32", "b": "BOOL"}


def v2_tensors(body, inputs: list) -> dict:
    """A V2 infer request's (`POST /v2/models/NAME/infer`) tensors as `{name: array}`, each
    shaped by its `shape`; only BYTES inputs (texts) are taken."""
    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
        raise RequestError(f"the body must be a JSON object with \"inputs\": a list of tensors, "
                           f"not {_short(body)}")
    tensors = {}
    for i, tensor in enumerate(body["inputs"]):
        where = f"inputs[{i}]"
        if not isinstance(tensor, dict) or not {"name", "shape", "datatype", "data"} <= set(
                tensor):
            raise RequestError(f"{where} must have name, shape, datatype and data, not "
                               f"{_short(tensor)}")
        name = tensor["name"]
        if name not in inputs:
            raise RequestError(f"{where}: unknown input {_short(name)} (the model takes "
                               f"{', '.join(inputs)})")
        if tensor["datatype"] != "BYTES":
            raise RequestError(f"input {name}: datatype {_short(tensor['datatype'])}; texts are "
                               f"BYTES")
        shape = tensor["shape"]
        if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)):
            raise RequestError(f"input {name}: shape must be a list of sizes, not "
                               f"{_short(shape)}")
        tensors[name] = shaped(name, tensor["data"], shape)
    missing = [name for name in inputs if name not in tensors]
    if missing:
        raise RequestError(f"no input {', '.join(missing)} (the model takes "
                           f"{', '.join(inputs)})")
    return tensors


def shaped(name: str, values, shape: list, noun: str = "values") -> np.ndarray:
    """Input `name`'s `values` (texts as strings or bytes, a list or nested lists) as an object
    array of `shape` (sizes, none negative); one line if their count does not fill it."""
    array = np.asarray(values, dtype=object).ravel()
    if array.size != int(np.prod(shape)):
        raise RequestError(f"input {name}: {array.size} {noun} for shape {shape}")
    return array.reshape(shape)


def v2_rows(tensors: dict, inputs: list, takes_list: dict) -> list:
    """Rows `{input: text or list of texts}` of V2 tensors (texts as strings or UTF-8 bytes):
    a `[batch]` tensor per text input, `[batch, n]` for a list input."""
    counts = {name: (len(value) if value.ndim else 1) for name, value in tensors.items()}
    if len(set(counts.values())) > 1:
        raise RequestError("the inputs have different numbers of rows: " + ", ".join(
            f"{name} {count}" for name, count in counts.items()))
    rows = []
    for i in range(next(iter(counts.values()), 0)):
        row = {}
        for name in inputs:
            value = tensors[name][i] if tensors[name].ndim else tensors[name]
            where = f"input {name}[{i}]"
            if takes_list[name]:
                row[name] = [_decoded(v, where) for v in np.asarray(value, dtype=object).ravel()]
            else:
                if isinstance(value, np.ndarray):
                    raise RequestError(f"{where}: one text per row, not {value.shape}")
                row[name] = _decoded(value, where)
        rows.append(row)
    return rows


def _decoded(value, where: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(f"{where} is not UTF-8 text ({e.reason})") from None
    if isinstance(value, str):
        return value
    raise RequestError(f"{where} must be text, not {_short(value)}")


def v2_outputs(outputs: dict) -> list:
    """`(name, shape, datatype, data)` of each output, as V2 tensors (REST and gRPC)."""
    tensors = []
    for name in sorted(outputs):
        value = np.asarray(jsonable(outputs[name]), dtype=object)
        kind = np.asarray(outputs[name]).dtype.kind
        tensors.append((name, list(value.shape), _V2_DATATYPES.get(kind, "BYTES"),
                        value.ravel().tolist()))
    return tensors


def v2_infer_response(model_name: str, outputs: dict, request_id: str = "") -> dict:
    return {"model_name": model_name, "id": request_id, "outputs": [
        {"name": name, "shape": shape, "datatype": datatype, "data": data}
        for name, shape, datatype, data in v2_outputs(outputs)]}


def v2_metadata(model_name: str, inputs: list, takes_list: dict, example_outputs: dict) -> dict:
    """`GET /v2/models/NAME`: the model's inputs (BYTES texts) and outputs."""
    def entry(name, example, datatype=None):
        value = np.asarray(example)
        return {"name": name, "datatype": datatype or _V2_DATATYPES.get(value.dtype.kind,
                                                                        "BYTES"),
                "shape": [-1, *value.shape]}

    return {"name": model_name, "versions": ["1"], "platform": "bert_tf2",
            "inputs": [{"name": name, "datatype": "BYTES",
                        "shape": [-1, -1] if takes_list[name] else [-1]} for name in inputs],
            "outputs": [entry(name, value) for name, value in sorted(example_outputs.items())]}


# ---------------------------------------------------------------- TF Serving's classify and regress
def parse_examples(body, inputs: list, takes_list: dict) -> list:
    """Rows of a classify or regress request: `{"examples": [{feature: value}, ...]}` with an
    optional `"context"` of features every example shares, as TF Serving takes them."""
    if not isinstance(body, dict) or not isinstance(body.get("examples"), list):
        raise RequestError(f"the body must be a JSON object with \"examples\": a list of "
                           f"objects, not {_short(body)}")
    context = body.get("context", {})
    if not isinstance(context, dict):
        raise RequestError(f"\"context\" must be an object of features, not {_short(context)}")
    signature = body.get("signature_name", SIGNATURES[0])
    if signature not in SIGNATURES:
        raise RequestError(f"signature_name {_short(signature)}: this model serves "
                           f"{' or '.join(SIGNATURES)}")
    read = {name: (_texts if takes_list[name] else _text) for name in inputs}
    rows = []
    for i, example in enumerate(body["examples"]):
        if not isinstance(example, dict):
            raise RequestError(f"examples[{i}] must be an object of features, not "
                               f"{_short(example)}")
        rows.append(_row({**context, **example}, inputs, read, f"examples[{i}]"))
    return rows


def classify_response(outputs: dict, classes: list) -> dict:
    """`{"result": [[[class, score], ...] per example]}`: each class with its probability."""
    probabilities = np.asarray(outputs["probabilities"], np.float64)
    return {"result": [[[name, float(p)] for name, p in zip(classes, row)]
                       for row in probabilities]}


def regress_response(outputs: dict) -> dict:
    """`{"result": [value per example]}`."""
    return {"result": [float(v) for v in np.asarray(outputs["score"], np.float64)]}
