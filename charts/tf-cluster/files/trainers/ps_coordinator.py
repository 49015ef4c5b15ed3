"""ParameterServer coordinator (the chief): Keras `fit` with a DatasetCreator.

Workers and ps run tf_server.py. Checkpoints go to CHECKPOINT_DIR every epoch
(the sidecar evaluator reads them); the model is exported to MODEL_DIR. A
restarted coordinator (its pod killed, or a ps lost: the chief then exits and its
Job starts it again) restores the last checkpoint into the ps and goes on from
the epoch after it: Keras' BackupAndRestore does not support this strategy.
"""

import os

os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import common  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402


def main():
    d = common.dirs()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    n_workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    n_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    print(f"coordinator: connecting to {n_workers} worker(s) and {n_ps} ps", flush=True)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = common.build_model(keras)
        common.compile_model(keras, model, steps_per_execution=5)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    common.shared_dirs()  # an evaluator makes them too, at the same time
    manager = tf.train.CheckpointManager(ckpt, d["checkpoints"], max_to_keep=3)
    done = 0
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
        done = int(manager.latest_checkpoint.rsplit("-", 1)[1])  # saved as ckpt-<epochs done>
        print(f"coordinator: restored {manager.latest_checkpoint}; resuming after epoch {done}", flush=True)

    class SaveCheckpoint(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            manager.save(checkpoint_number=epoch + 1)

    def dataset_fn(input_context):
        return common.dataset(tf).shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    history = model.fit(
        keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=common.EPOCHS,
        initial_epoch=min(done, common.EPOCHS),
        steps_per_epoch=common.STEPS_PER_EPOCH,
        callbacks=[
            SaveCheckpoint(),
            common.progress_callback(keras, common.EPOCHS, steps=False),
            keras.callbacks.TensorBoard(log_dir=d["logs"]),
        ],
        verbose=0,
    )
    model.save(d["model"])
    final = {k: round(float(v[-1]), 4) for k, v in history.history.items()}
    # Steps the ps applied: above EPOCHS * STEPS_PER_EPOCH when a worker's call was run again elsewhere
    # after it was lost mid-call (the coordinator retries the whole call); the faults tests read it.
    steps = int(model.optimizer.iterations.numpy())
    common.emit("RESULT", task="chief:0", chief=True, model_dir=d["model"], steps=steps, **final)


if __name__ == "__main__":
    main()
