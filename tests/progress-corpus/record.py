"""Record the corpus's real Keras samples: a tiny model fitted with tf_keras or Keras 3, its output
written to a pipe (as in a pod: not a terminal, so Keras draws its bar with \\r and \\b).

    python tests/progress-corpus/record.py tf_keras 1 > tests/progress-corpus/tf-keras-bars.txt

Arguments: the Keras (tf_keras | keras3), the fit's verbose (1 | 2), then a variant: nan (a learning
rate that makes the loss NaN), unknown (a dataset of unknown length: the first epoch's bar says
`Unknown`), digits (a metric whose name has a digit), hypertune (a cloudml-hypertune report per epoch;
run it under the chart's launcher, which echoes the reports). The .json beside each sample is what
both readers must read from it (tests/launcher/test_progress_corpus.py): check it by eye when you
record again (times per step change from run to run).
"""

import os
import sys
import time


def main():
    which, verbose = sys.argv[1], int(sys.argv[2])
    variant = sys.argv[3] if len(sys.argv) > 3 else ""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if which == "tf_keras" else "0"
    if which == "tf_keras":
        import tf_keras as keras
    else:
        import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = rng.integers(0, 2, size=256)
    model = keras.Sequential(
        [keras.layers.Input(shape=(8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(2)]
    )
    metrics = ["accuracy"]
    if variant == "digits":
        metrics = [keras.metrics.SparseTopKCategoricalAccuracy(k=1, name="top1_accuracy"), "accuracy"]
    model.compile(
        optimizer=keras.optimizers.SGD(1e6 if variant == "nan" else 0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=metrics,
    )
    callbacks = []
    if variant == "hypertune":
        import hypertune

        reporter = hypertune.HyperTune()

        class Report(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                reporter.report_hyperparameter_tuning_metric(
                    hyperparameter_metric_tag="accuracy", metric_value=logs["accuracy"], global_step=(epoch + 1) * 32
                )
                time.sleep(2.5)  # the launcher echoes the file every 2 s

        callbacks.append(Report())
    if variant == "unknown":
        data = tf.data.Dataset.from_generator(
            lambda: ((x[i : i + 8], y[i : i + 8]) for i in range(0, 256, 8)),
            output_signature=(tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None,), tf.int64)),
        )
        model.fit(data, epochs=2, verbose=verbose)
    else:
        epochs = 2 if variant == "digits" else 3
        split = 0.25 if verbose == 2 else 0.0
        model.fit(x, y, epochs=epochs, batch_size=8, verbose=verbose, validation_split=split, callbacks=callbacks)


if __name__ == "__main__":
    main()
