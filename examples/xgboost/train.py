"""Distributed XGBoost on CPU: every TrainJob node is one worker of XGBoost's collective.

The controller injects DMLC_TRACKER_URI (``<job>-node-0-0.<job>``), DMLC_TRACKER_PORT (29500),
DMLC_TASK_ID (the pod's completion index) and DMLC_NUM_WORKER into each ``node`` container.
As upstream's XGBoost runtime expects, the worker with task id 0 (the pod the tracker URI
names) starts the Rabit tracker on that port, at the address the URI resolves to; then every
worker joins the collective through the tracker (ranks sorted by task id, so rank ==
DMLC_TASK_ID).

Each worker generates the same synthetic binary-classification dataset and keeps only its own
rows (``rank::world``) for training; the validation rows are shared. ``xgboost.train`` builds
one model together: gradient histograms are all-reduced every round, so both workers end
with the same trees. Each worker prints the number of training rows summed over the
collective (the whole dataset, which no worker holds alone), its final validation logloss
and a digest of the model; rank 0 saves the model to MODEL_PATH.

Run locally: ``trainer run -f examples/xgboost/trainjob.yaml`` (from the repository root).
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import numpy as np
import xgboost as xgb
from xgboost import collective

ROWS = int(os.environ.get("ROWS", "4000"))
FEATURES = 8
VALID_ROWS = 800
ROUNDS = int(os.environ.get("ROUNDS", "20"))
PARAMS = {
    "objective": "binary:logistic",
    "eval_metric": "logloss",
    "tree_method": "hist",
    "max_depth": 3,
    "eta": 0.3,
    # One thread per worker keeps two workers on one small machine light; on a cluster set
    # NTHREAD in the TrainJob's env to the cores each pod gets.
    "nthread": int(os.environ.get("NTHREAD", "1")),
}


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """The same generated rows on every worker (a fixed seed)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS + VALID_ROWS, FEATURES))
    logit = 1.5 * x[:, 0] - x[:, 1] + 0.8 * x[:, 2] * x[:, 3]
    y = (logit + rng.normal(scale=0.5, size=len(x)) > 0).astype(np.float64)
    return x, y


def tracker_bind_address(tracker_uri: str) -> str:
    """Where worker 0's tracker listens: the address the tracker URI resolves to (its own pod's
    IP on a cluster, 127.0.0.1 on the local plane), or every address while that name does not
    resolve yet (a pod's DNS record can lag its start)."""
    try:
        return socket.gethostbyname(tracker_uri)
    except OSError:
        return "0.0.0.0"


def main() -> None:
    rank = int(os.environ["DMLC_TASK_ID"])
    world = int(os.environ["DMLC_NUM_WORKER"])
    tracker_uri = os.environ["DMLC_TRACKER_URI"]
    tracker_port = int(os.environ["DMLC_TRACKER_PORT"])

    tracker = None
    if rank == 0:
        tracker = xgb.tracker.RabitTracker(
            n_workers=world,
            host_ip=tracker_bind_address(tracker_uri),
            port=tracker_port,
            sortby="task",
        )
        tracker.start()
        print(f"rank 0: tracker for {world} workers on port {tracker_port}", flush=True)

    with collective.CommunicatorContext(
        dmlc_communicator="rabit",
        dmlc_tracker_uri=tracker_uri,
        dmlc_tracker_port=tracker_port,
        dmlc_task_id=str(rank),
    ):
        assert collective.get_rank() == rank and collective.get_world_size() == world
        x, y = dataset()
        x_train, y_train = x[:ROWS][rank::world], y[:ROWS][rank::world]
        train = xgb.DMatrix(x_train, label=y_train)
        valid = xgb.DMatrix(x[ROWS:], label=y[ROWS:])
        rows = collective.allreduce(np.array([len(y_train)], dtype=np.float64), collective.Op.SUM)
        local, total = len(y_train), int(rows[0])
        print(f"rank {rank}/{world}: {local} local rows, {total} in the collective", flush=True)
        history: dict[str, dict[str, list[float]]] = {}
        booster = xgb.train(
            PARAMS,
            train,
            num_boost_round=ROUNDS,
            evals=[(valid, "valid")],
            evals_result=history,
            verbose_eval=False,
        )
        logloss = history["valid"]["logloss"][-1]
        digest = hashlib.sha256(bytes(booster.save_raw("json"))).hexdigest()[:16]
        print(f"rank {rank} final valid-logloss: {logloss:.6f} model sha256: {digest}", flush=True)
        if rank == 0:
            path = Path(os.environ.get("MODEL_PATH", "xgboost-model/model.json"))
            path.parent.mkdir(parents=True, exist_ok=True)
            booster.save_model(path)
            print(f"rank 0 saved the model to {path}", flush=True)
    if tracker is not None:
        tracker.wait_for(60)


if __name__ == "__main__":
    main()
