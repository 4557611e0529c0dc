"""`serve.py`'s server on an export's real runtime, made slow or held on purpose, for the tests
of what a server does under load and at its edges (tests/test_model_server.py):

    python tests/serving_harness.py EXPORT_DIR PORT [--delay_s=S] [--gate=FILE] [serve flags]

`--delay_s`: each batch takes S seconds more (requests stay in flight long enough to be seen);
`--gate`: warm-up waits until FILE exists (the server is seen live but not ready);
`--fail_on=TEXT`: a batch holding a row whose first input is TEXT raises (the model failing)."""
import logging
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bert_tf2.model_server.app import ServerSettings, serve  # noqa: E402
from bert_tf2.tasks.runtimes import load_runtime  # noqa: E402


class Held:
    """The export's runtime (`inference.runtime`'s interface), slowed, gated or failing."""

    def __init__(self, runtime, delay_s: float, gate: str | None, fail_on: str | None = None):
        self.runtime, self.delay_s, self.gate, self.fail_on = runtime, delay_s, gate, fail_on
        self.input_names = runtime.input_names
        self.list_inputs = getattr(runtime, "list_inputs", ())

    def warm_up(self, batches):
        while self.gate and not os.path.exists(self.gate):
            time.sleep(0.02)
        self.runtime.warm_up(batches)

    def __call__(self, *texts):
        time.sleep(self.delay_s)
        if self.fail_on is not None and self.fail_on in texts[0]:
            raise RuntimeError(f"the model failed on {self.fail_on!r}")
        return self.runtime(*texts)


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    export_dir, port, *rest = sys.argv[1:]
    options = dict(arg.lstrip("-").split("=", 1) for arg in rest)
    delay_s, gate = float(options.pop("delay_s", 0)), options.pop("gate", None)
    fail_on = options.pop("fail_on", None)
    defaults = ServerSettings(export_dir, "m")
    settings = ServerSettings(export_dir, "m", host="127.0.0.1", port=int(port), **{
        key: value if key == "runtime" else type(getattr(defaults, key))(value)
        for key, value in options.items()})
    runtime = load_runtime(export_dir, settings.runtime)
    serve(settings, Held(runtime, delay_s, gate, fail_on))


if __name__ == "__main__":
    main()
