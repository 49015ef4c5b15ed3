"""MultiWorkerMirrored Keras `fit` with BackupAndRestore; the chief exports the model.

Run on every worker (and the chief, if any) of a multiWorkerMirrored release.
A restarted task resumes from the last epoch in CHECKPOINT_DIR/backup.
"""

import os
import shutil
import tempfile

import common
import tensorflow as tf

# The strategy must exist before any other TF op (collectives are set up here).
strategy = tf.distribute.MultiWorkerMirroredStrategy()

import tf_keras as keras  # noqa: E402  (TF_USE_LEGACY_KERAS: Keras 3 breaks fit under MWMS)


def main():
    d = common.dirs()
    task_type, index, is_chief = common.task()
    print(f"task {task_type}:{index} chief={is_chief} replicas={strategy.num_replicas_in_sync}", flush=True)
    with strategy.scope():
        model = common.build_model(keras)
        common.compile_model(keras, model)
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir=os.path.join(d["checkpoints"], "backup")),
        common.progress_callback(keras, common.EPOCHS),
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
