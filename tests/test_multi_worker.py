"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 train like one process."""
import json
import os
import sys

import numpy as np
import pytest
import warm_python
from conftest import free_ports

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "tests", "multi_worker_script.py")


def test_two_workers_match_one_process_on_the_same_global_batch(tmp_path):
    single = warm_python.run([sys.executable, SCRIPT, "single", str(tmp_path / "single"),
                              str(tmp_path / "single.npz")], cwd=REPO, timeout=600, warm=True)
    assert single.returncode == 0, single.stderr
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})}
        processes.append(warm_python.start(
            [sys.executable, SCRIPT, "multi", str(tmp_path / "multi"),
             str(tmp_path / f"worker{index}.npz")], cwd=REPO, env=env, warm=True))
    for process in processes:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err

    one = np.load(tmp_path / "single.npz")
    chief, other = np.load(tmp_path / "worker0.npz"), np.load(tmp_path / "worker1.npz")
    assert int(one["replicas"]) == 1 and int(chief["replicas"]) == 2
    assert bool(chief["chief"]) and not bool(other["chief"])
    # The loss of the last loop, over the same global batches, and the trained weights.
    assert abs(float(chief["loss"]) - float(one["loss"])) < 1e-4
    for name in one.files:
        if name in ("loss", "replicas", "chief"):
            continue
        np.testing.assert_allclose(chief[name], one[name], rtol=0, atol=5e-5, err_msg=name)
        np.testing.assert_array_equal(chief[name], other[name])  # the workers agree exactly
    # Only the chief's checkpoints land in output_dir.
    saved = sorted(f for f in os.listdir(tmp_path / "multi") if f.endswith(".index"))
    assert saved == ["model.ckpt-3.index", "model.ckpt-6.index"]
