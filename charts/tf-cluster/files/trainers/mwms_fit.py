"""MultiWorkerMirrored Keras `fit` with BackupAndRestore; the chief exports the model.

Run on every worker (and the chief, if any) of a multiWorkerMirrored release. A restarted task
resumes from CHECKPOINT_DIR/backup: at the step a preemption stopped the run (TensorFlow's
PreemptionCheckpointHandler, below), else at the last epoch's end (a crash, a lost node).
"""

import os
import shutil
import tempfile

import common
import tensorflow as tf

# The strategy must exist before any other TF op (collectives are set up here).
strategy = tf.distribute.MultiWorkerMirroredStrategy()

import tf_keras as keras  # noqa: E402  (TF_USE_LEGACY_KERAS: Keras 3 breaks fit under MWMS)


def save_before_preemption() -> bool:
    """Whether BackupAndRestore saves when a task is preempted: TensorFlow's PreemptionCheckpointHandler.
    On SIGTERM to any task (an eviction, a drain, a spot reclaim; the launcher forwards it), every
    task finishes the step in progress, all save at that same step, and all exit 42, TensorFlow's
    restart code, which the chart's `job.restartExitCodes` retries without counting; the next run
    goes on from that step. tf_keras turns the handler on only on Google Cloud
    (tf_keras/src/distribute/distributed_file_utils.py, support_on_demand_checkpoint_callback asks
    GCE's metadata server), although TensorFlow's handler serves any platform, SIGTERM being its
    default notice and 42 its default exit (tensorflow/python/distribute/failure_handling/
    failure_handling.py, TerminationConfig): this opens that gate. PREEMPTION_CHECKPOINT=0 keeps
    tf_keras' default (epoch backups only)."""
    if os.environ.get("PREEMPTION_CHECKPOINT", "1") == "0":
        return False
    try:
        from tf_keras.src.distribute import worker_training_state
    except ImportError as e:  # another tf_keras layout: epoch backups still work
        print(f"warning: no preemption checkpoints with this tf_keras ({e}); resuming at epochs", flush=True)
        return False
    worker_training_state.support_on_demand_checkpoint_callback = lambda s: isinstance(
        s, tf.distribute.MultiWorkerMirroredStrategy
    )
    resume = worker_training_state.WorkerTrainingState.maybe_load_initial_counters_from_ckpt

    def within_the_epoch(self, steps_per_epoch, initial_epoch, mode):
        # tf_keras goes on at the saved step + 1, moving to the next epoch only when the saved step
        # is its last. A run with fewer STEPS_PER_EPOCH than the one that saved (a values change, a
        # new run on the same checkpoints) would start past its epoch's end, run no step and raise
        # "Empty logs": that epoch is done.
        epoch, step = resume(self, steps_per_epoch, initial_epoch, mode)
        if steps_per_epoch and step >= steps_per_epoch:
            print(
                f"resuming: the backup's step {step} is past this run's {steps_per_epoch} steps an epoch,"
                f" so epoch {epoch} is done",
                flush=True,
            )
            return epoch + 1, 0
        return epoch, step

    worker_training_state.WorkerTrainingState.maybe_load_initial_counters_from_ckpt = within_the_epoch
    return True


def same_backup_as_the_chief(backup_dir: str, index: int) -> None:
    """With the preemption save on, each task restores at start from its own copy of the backup
    (PreemptionCheckpointHandler reads its write directory: the chief's `chief/`, another worker's
    `workertemp_<index>/`), and tf_keras deletes the other workers' copies after each epoch's backup.
    A run restarted after a crash (not a preemption) then had the chief resume at its last epoch
    and the others at the start: their collectives disagree ("Collective instance ... expected
    type 1 and data_type 9") and every restart fails again. A worker takes the chief's backup as
    its copy before training, so every task restores the same step."""
    mine = os.path.join(backup_dir, f"workertemp_{index}")
    shutil.rmtree(mine, ignore_errors=True)
    if os.path.isdir(os.path.join(backup_dir, "chief")):
        shutil.copytree(os.path.join(backup_dir, "chief"), mine)


def main():
    d = common.dirs()
    task_type, index, is_chief = common.task()
    print(f"task {task_type}:{index} chief={is_chief} replicas={strategy.num_replicas_in_sync}", flush=True)
    with strategy.scope():
        model = common.build_model(keras)
        common.compile_model(keras, model)
    backup_dir, at_preemption = os.path.join(d["checkpoints"], "backup"), save_before_preemption()
    common.shared_dirs()
    common.shared_dir(backup_dir)  # every task makes it at once: settled before TensorFlow makes its own in it
    if at_preemption and not is_chief:
        same_backup_as_the_chief(backup_dir, index)
    callbacks = [
        # First: it counts each step before BackupAndRestore may save and exit there. Its batch hooks
        # also make Keras call BackupAndRestore's, where the preemption save happens.
        common.progress_callback(keras, common.EPOCHS),
        keras.callbacks.BackupAndRestore(backup_dir=backup_dir, save_before_preemption=at_preemption),
    ]
    if is_chief:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=d["logs"], update_freq="epoch"))
    history = model.fit(
        common.dataset(tf), epochs=common.EPOCHS, steps_per_epoch=common.STEPS_PER_EPOCH, callbacks=callbacks, verbose=0
    )
    # Every worker must take part in save (it runs collectives); only the chief keeps it.
    target = d["model"] if is_chief else tempfile.mkdtemp(prefix="model-")
    model.save(target)
    if not is_chief:
        shutil.rmtree(target, ignore_errors=True)
    final = {k: round(float(v[-1]), 4) for k, v in history.history.items()} if history.history else {}
    common.emit("RESULT", task=f"{task_type}:{index}", chief=is_chief, model_dir=target if is_chief else None, **final)


if __name__ == "__main__":
    main()
