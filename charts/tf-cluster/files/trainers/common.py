"""Shared pieces of the example trainers: the chart's env, data, model, progress.

Every trainer honours the directories the chart exports (DATA_DIR, MODEL_DIR,
CHECKPOINT_DIR, LOG_DIR) and prints machine-readable lines that
`tf-cluster run-local` turns into its status table:

    TF_CLUSTER_PROGRESS {"epoch": 2, "epochs": 5, "loss": 0.31, "accuracy": 0.9}
    TF_CLUSTER_EVENT {"event": "resumed", "epoch": 2, "step": 80}
    TF_CLUSTER_RESULT {"loss": ..., "accuracy": ..., "model_dir": ...}
"""

import atexit
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FEATURES = 16
CLASSES = 4


def setting(name, default):
    return type(default)(os.environ.get(name, default))


EPOCHS = setting("EPOCHS", 4)
STEPS_PER_EPOCH = setting("STEPS_PER_EPOCH", 30)
BATCH_SIZE = setting("BATCH_SIZE", 64)
# EPOCHS_AFTER_RESUME=N (the e2e tests' lost-node scenarios; 0, the default: off): a run that
# resumed from a backup at epoch R ends after epoch R+N-1 (the rest of R and N-1 more), or at
# EPOCHS if that comes first, so that what it trains after a fault does not depend on how fast
# the machine was before it. Every task must resume from the same backup, or the ones that did
# not would train on alone: under MultiWorkerMirrored a lost task restarts them all.
EPOCHS_AFTER_RESUME = setting("EPOCHS_AFTER_RESUME", 0)


def dirs():
    base = tempfile.gettempdir()
    return {
        "data": os.environ.get("DATA_DIR", os.path.join(base, "data")),
        "model": os.environ.get("MODEL_DIR", os.path.join(base, "model")),
        "checkpoints": os.environ.get("CHECKPOINT_DIR", os.path.join(base, "checkpoints")),
        "logs": os.environ.get("LOG_DIR", os.path.join(base, "logs")),
    }


def shared_dir(path, settle=20.0):
    """Make `path` (and its parents) and wait until this task can create entries in it. On a network
    filesystem a directory that another task's node has just made can refuse this one for a moment:
    GlusterFS's brick makes it as root and gives it to its owner after, and a client that looked at
    it in between keeps that (stat cached up to a second), so TensorFlow's own makedirs in it fails
    with Permission denied (measured: MultiWorkerMirrored tasks on three nodes creating
    CHECKPOINT_DIR/backup at once, a counted failure at the start). Retried for `settle` seconds,
    then the error says whose the directory is."""
    deadline, pause = time.monotonic() + settle, 0.1
    while True:
        try:
            os.makedirs(path, exist_ok=True)
            os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=path))
            return path
        except PermissionError as e:
            if time.monotonic() >= deadline:
                there = path
                while not os.path.isdir(there) and os.path.dirname(there) != there:
                    there = os.path.dirname(there)  # the directory that refuses: the path or a parent
                st = os.stat(there)
                owner = f"{there} is owned by uid {st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:o}"
                raise PermissionError(
                    f"cannot create entries in {path} as uid {os.getuid()} ({owner}) after {settle:.0f}s: "
                    "give the pods' user write access to the volume (podSecurityContext.fsGroup, or the "
                    f"volume's own permissions): {e}"
                ) from e
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def shared_dirs():
    """CHECKPOINT_DIR and LOG_DIR made and settled (shared_dir) before a program writes in them,
    since several tasks make them at once."""
    d = dirs()
    for key in ("checkpoints", "logs"):
        shared_dir(d[key])
    return d


def task():
    """(type, index, is_chief) from TF_CONFIG; no TF_CONFIG = a single local task."""
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    t = cfg.get("task") or {}
    task_type, index = t.get("type", "chief"), int(t.get("index", 0))
    has_chief = "chief" in (cfg.get("cluster") or {})
    is_chief = task_type == "chief" or (task_type == "worker" and index == 0 and not has_chief) or not cfg
    return task_type, index, is_chief


def emit(kind, **payload):
    print(f"TF_CLUSTER_{kind} {json.dumps(payload, sort_keys=True)}", flush=True)


def make_data(n=4096, seed=7):
    """A generated classification problem (no download): CLASSES Gaussian blobs.

    Written once to DATA_DIR/blobs.npz so every task (and a resumed run) reads the
    same examples, as a real job would read its shared data volume.
    """
    import numpy as np

    path = os.path.join(dirs()["data"], f"blobs-{n}-{seed}.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            return z["x"], z["y"]
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 0.6, size=(CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, size=n)
    x = (centers[y] + rng.normal(0, 1.0, size=(n, FEATURES))).astype("float32")
    y = y.astype("int64")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path[:-4]}.{os.getpid()}.tmp.npz"
        np.savez(tmp, x=x, y=y)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only data volume: use the in-memory copy
    return x, y


def dataset(tf, batch_size=BATCH_SIZE, repeat=True):
    x, y = make_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1)
    if repeat:
        ds = ds.repeat()
    return ds.batch(batch_size).prefetch(2)


def build_model(keras):
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    return model


def compile_model(keras, model, **kw):
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        **kw,
    )


class WritersLog:
    """WRITERS_LOG=<folder> (a name: in CHECKPOINT_DIR, where the e2e tests' lost-node scenarios
    read it): each task appends, at most once a second while it trains, a line naming its task, its
    pod (TF_CLUSTER_POD_NAME) and its step, so that a test can tell from the storage itself
    whether two incarnations of one task ever trained at the same time. A file per pod in that
    folder: appends of several clients to one file of a network filesystem are not atomic (on
    GlusterFS two tasks' lines written in the same millisecond from two nodes came out spliced)."""

    def __init__(self):
        self.path, self.last = os.environ.get("WRITERS_LOG"), 0.0
        self.pod = os.environ.get("TF_CLUSTER_POD_NAME")
        if self.path and not os.path.isabs(self.path):  # a name: in CHECKPOINT_DIR
            self.path = os.path.join(dirs()["checkpoints"], self.path)
        if self.path:
            shared_dir(self.path)
            self.path = os.path.join(self.path, f"{self.pod or os.getpid()}.jsonl")

    def step(self, step):
        now = time.time()
        if not self.path or now - self.last < 1:
            return
        self.last = now
        task_type, index, _ = task()
        line = json.dumps({"t": now, "task": f"{task_type}:{index}", "pod": self.pod, "step": step})
        with open(self.path, "a") as f:  # this pod's own file: one writer
            f.write(line + "\n")


WRITERS = WritersLog()


def progress_callback(keras, epochs, steps=True):
    """Epoch reports and the step count. `resumed` names the epoch and step a restarted task goes on
    from; `stopped`, printed at exit when the program ends short of its last step (a preemption, a
    lost peer), the last step it finished: a preemption's cost in steps is `stopped.step - the next
    resumed.step` (tests/e2e/cluster/test_faults.py measures it). Put it first in `callbacks`, so that
    a step is counted before a callback after it saves and exits there (BackupAndRestore's
    preemption save). steps=False: epochs only (Keras refuses batch-level callbacks under
    ParameterServerStrategy), `resumed` at an epoch's first step and no `stopped`. With
    EPOCHS_AFTER_RESUME, a resumed run stops that many epochs after the one it resumed in."""

    class Progress(keras.callbacks.Callback):
        epoch = 0
        step = None  # global steps finished (epoch * steps per epoch + batches), once training began
        resumed = None  # the epoch this run resumed in (None: it began at the first step)
        finished = False

        def on_train_begin(self, logs=None):
            atexit.register(self.at_exit)

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = int(epoch)
            if self.step is None:  # the first epoch of this run: where BackupAndRestore put it
                self.began(0)

        def began(self, batch):
            self.step = int(self.epoch * (self.params.get("steps") or 0) + batch)
            if self.step > 0:
                self.resumed = self.epoch
                emit("EVENT", event="resumed", epoch=self.epoch, step=self.step)

        def on_epoch_end(self, epoch, logs=None):
            logs = {k: round(float(v), 4) for k, v in (logs or {}).items()}
            emit("PROGRESS", epoch=epoch + 1, epochs=epochs, **logs)
            after = EPOCHS_AFTER_RESUME
            if after > 0 and self.resumed is not None and epoch + 1 >= self.resumed + after:
                print(f"ending at epoch {epoch + 1}: EPOCHS_AFTER_RESUME={after} from epoch {self.resumed}", flush=True)
                self.model.stop_training = True

        def on_train_end(self, logs=None):
            self.finished = True

        def at_exit(self):
            if steps and not self.finished and self.step is not None:
                emit("EVENT", event="stopped", epoch=self.epoch, step=self.step)

    class StepProgress(Progress):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = int(epoch)  # the first step is known at the first batch (mid-epoch resume)

        def on_train_batch_begin(self, batch, logs=None):
            if self.step is None:
                self.began(batch)

        def on_train_batch_end(self, batch, logs=None):
            # `batch` is the last batch of the call (steps_per_execution > 1 reports once per call)
            self.step = int(self.epoch * (self.params.get("steps") or 0) + batch + 1)
            WRITERS.step(self.step)

    return StepProgress() if steps else Progress()


def fail(msg):
    sys.stderr.write(f"error: {msg}\n")
    sys.exit(2)
