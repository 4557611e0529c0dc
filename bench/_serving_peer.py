"""A serving worker of `bench/serving.py`, run in `bench/.venv-serving` (transformers, PyTorch,
optimum and ONNX Runtime), never in the project's environment.

    python bench/_serving_peer.py --side {pytorch,ort-fp32,ort-int8} --hf_dir DIR --work_dir W
        [--task {classify,embed}]

`--hf_dir` holds the weights in Hugging Face's format (model.safetensors, config.json, vocab.txt):
a fine-tuned classifier (`classify`: raw text to probabilities), or a sentence encoder (`embed`:
`bench/serving_embeddings.py`; mean pooling over real tokens, L2-normalised, as
sentence-transformers pools all-MiniLM-L6-v2). ONNX sides export it with optimum; fp32 runs it
after optimum's graph fusions (O2), int8 after its dynamic quantisation of the export for this
CPU (`ORTQuantizer`, `AutoQuantizationConfig.avx512_vnni(is_static=False)` where the CPU has
AVX-512 VNNI, else `.avx2`; per tensor,
faster here than per channel, which `PEER_PER_CHANNEL=1` picks), then run the ONNX file on an
`onnxruntime.InferenceSession` with NumPy inputs: the settings a user would pick for a fast CPU.
Each side tokenises with transformers' Rust tokenizer, from raw text. Commands arrive as JSON
lines on stdin (the protocol of `bench/serving.py`'s `Worker`); answers go to stdout as JSON
lines.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

PER_CHANNEL = os.environ.get("PEER_PER_CHANNEL", "0") == "1"


def cpu_flags() -> set:
    """The CPU's feature flags (/proc/cpuinfo), empty where they cannot be read."""
    try:
        return set(next(line for line in open("/proc/cpuinfo")
                        if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration, IndexError):
        return set()


def quantization_kind() -> str:
    """optimum's configuration for this CPU: avx512_vnni where the CPU has it, else avx2."""
    return "avx512_vnni" if "avx512_vnni" in cpu_flags() else "avx2"


def onnx_session(hf_dir: str, work_dir: str, quantize: bool, task: str = "classify"):
    import onnxruntime
    from optimum.onnxruntime import (
        ORTModelForFeatureExtraction,
        ORTModelForSequenceClassification,
        ORTOptimizer,
        ORTQuantizer,
    )
    from optimum.onnxruntime.configuration import AutoQuantizationConfig, OptimizationConfig

    exported = os.path.join(work_dir, "onnx")
    optimized = os.path.join(work_dir, "onnx-o2")
    kind = quantization_kind()
    quantized = os.path.join(work_dir, "onnx-int8" + ("-per-channel" if PER_CHANNEL else "")
                             + ("" if kind == "avx512_vnni" else f"-{kind}"))
    if not os.path.isfile(os.path.join(optimized, "model_optimized.onnx")):
        model_class = (ORTModelForFeatureExtraction if task == "embed"
                       else ORTModelForSequenceClassification)
        model = model_class.from_pretrained(hf_dir, export=True)
        model.save_pretrained(exported)
        optimizer = ORTOptimizer.from_pretrained(exported)
        optimizer.optimize(OptimizationConfig(optimization_level=2, optimize_for_gpu=False),
                           save_dir=optimized)
    path = os.path.join(optimized, "model_optimized.onnx")
    if quantize:
        # optimum's recipe quantises the plain export (its fused O2 graph cannot be quantised);
        # the session's own ORT_ENABLE_ALL optimisations then apply
        if not os.path.isfile(os.path.join(quantized, "model_quantized.onnx")):
            quantizer = ORTQuantizer.from_pretrained(exported)
            config = getattr(AutoQuantizationConfig, kind)(is_static=False,
                                                           per_channel=PER_CHANNEL)
            quantizer.quantize(config, save_dir=quantized)
        path = os.path.join(quantized, "model_quantized.onnx")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}

    def logits(encoded):
        feeds = {k: v.astype(np.int64) for k, v in encoded.items() if k in names}
        return session.run(None, feeds)[0]

    return logits, os.path.getsize(path)


def torch_model(hf_dir: str, task: str = "classify"):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    model = (AutoModel if task == "embed" else AutoModelForSequenceClassification
             ).from_pretrained(hf_dir).eval()
    size = os.path.getsize(os.path.join(hf_dir, "model.safetensors"))

    def logits(encoded):  # a classifier's logits, an encoder's last hidden states
        with torch.inference_mode():
            outputs = model(**{k: torch.from_numpy(v) for k, v in encoded.items()})
            return outputs[0].numpy()

    return logits, size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", required=True, choices=["pytorch", "ort-fp32", "ort-int8"])
    parser.add_argument("--hf_dir", required=True)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--task", choices=["classify", "embed"], default="classify")
    args = parser.parse_args()
    from transformers import BertTokenizerFast

    tokenizer = BertTokenizerFast(os.path.join(args.hf_dir, "vocab.txt"), do_lower_case=True)
    if args.side == "pytorch":
        logits, size = torch_model(args.hf_dir, args.task)
    else:
        logits, size = onnx_session(args.hf_dir, args.work_dir, args.side == "ort-int8",
                                    args.task)

    if args.task == "embed":
        def embed(text_a, text_b=None):
            encoded = tokenizer(text_a, padding=True, truncation=True,
                                max_length=args.max_seq_length, return_tensors="np")
            hidden = logits(dict(encoded))
            mask = encoded["attention_mask"][:, :, None].astype(hidden.dtype)
            mean = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)

        serve(embed, size)
        return

    def classify(text_a, text_b=None):
        encoded = tokenizer(text_a, text_b, padding=True, truncation="longest_first",
                            max_length=args.max_seq_length, return_tensors="np")
        scores = logits(dict(encoded))
        shifted = np.exp(scores - scores.max(-1, keepdims=True))
        return shifted / shifted.sum(-1, keepdims=True)

    serve(classify, size)


def peak_rss_bytes(pid="self") -> int:
    """A process's peak resident memory since its exec (VmHWM; getrusage's ru_maxrss would
    count the parent's peak from before the exec); 0 for a process that is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def serve(classify, size: int) -> None:
    """The worker loop `bench/serving.py` drives (shared by ours in `bench/serving.py`).
    `classify(text_a, text_b=None)` answers a request: probabilities, or an embedder's vectors."""
    print(json.dumps({"ready": True, "file_bytes": size}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        a, b = command["text_a"], command.get("text_b")
        if command["cmd"] == "warm_up":  # untimed: first calls build caches and plans
            for i in range(len(a)):
                classify([a[i]], None if b is None else [b[i]])
            classify(a, b)
            answer = {}
        elif command["cmd"] == "latency":  # one request per text (pair), each timed
            times, gap = [], command.get("gap_s", 0.0)  # idle before each: a quiet server
            for i in range(len(a)):
                if gap:
                    time.sleep(gap)
                start = time.perf_counter()
                classify([a[i]], None if b is None else [b[i]])
                times.append(time.perf_counter() - start)
            answer = {"seconds": times}
        elif command["cmd"] == "throughput":  # requests of `batch` texts, timed together
            batch = command["batch"]
            start = time.perf_counter()
            for i in range(0, len(a), batch):
                classify(a[i:i + batch], None if b is None else b[i:i + batch])
            answer = {"seconds": time.perf_counter() - start, "texts": len(a)}
        elif command["cmd"] == "predict":
            batch = command.get("batch", 32)
            probabilities = [classify(a[i:i + batch], None if b is None else b[i:i + batch])
                             for i in range(0, len(a), batch)]
            answer = {"label_id": np.concatenate(probabilities).argmax(-1).tolist()}
        elif command["cmd"] == "embed":  # an embedder's vectors, in batches
            batch = command.get("batch", 32)
            vectors = [classify(a[i:i + batch]) for i in range(0, len(a), batch)]
            answer = {"vectors": np.concatenate(vectors).round(6).tolist()}
        else:
            answer = {"error": f"unknown command {command['cmd']}"}
        answer["peak_rss_bytes"] = peak_rss_bytes()
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
