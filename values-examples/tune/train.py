"""A Keras program written for Vertex AI's hyperparameter tuning, unchanged for `tf-cluster tune`:
its hyperparameters are command-line flags, and it reports its metric with the cloudml-hypertune
library. The data is synthetic (two interleaved spirals), so the example needs no download.

    python3 train.py --learning_rate=0.01 --n_hidden=2 --n_neurons=32 --optimizer=adam
"""

import argparse
import json
import os

import hypertune
import numpy as np
import tensorflow as tf

p = argparse.ArgumentParser()
p.add_argument("--learning_rate", type=float, default=0.01)
p.add_argument("--n_hidden", type=int, default=1)
p.add_argument("--n_neurons", type=int, default=16)
p.add_argument("--optimizer", choices=["sgd", "adam"], default="adam")
p.add_argument("--epochs", type=int, default=4)
args = p.parse_args()


def spirals(n, seed):
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.05, 1, n)) * 3 * np.pi
    label = rng.integers(0, 2, n)
    sign = np.where(label == 1, 1.0, -1.0)
    x = np.stack([sign * t * np.cos(t), sign * t * np.sin(t)], axis=1) / 10 + rng.normal(0, 0.05, (n, 2))
    return x.astype("float32"), label.astype("float32")


x_train, y_train = spirals(4000, 0)
x_val, y_val = spirals(1000, 1)

multi_worker = bool(json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster"))
strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi_worker else tf.distribute.get_strategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(2,))])
    for _ in range(args.n_hidden):
        model.add(tf.keras.layers.Dense(args.n_neurons, activation="relu"))
    model.add(tf.keras.layers.Dense(1, activation="sigmoid"))
    optimizer = {"sgd": tf.keras.optimizers.SGD, "adam": tf.keras.optimizers.Adam}[args.optimizer]
    model.compile(optimizer(learning_rate=args.learning_rate), loss="binary_crossentropy", metrics=["accuracy"])

hpt = hypertune.HyperTune()


class ReportToHypertune(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        hpt.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=logs["val_accuracy"], global_step=epoch + 1
        )


model.fit(
    x_train,
    y_train,
    epochs=args.epochs,
    batch_size=64,
    validation_data=(x_val, y_val),
    callbacks=[ReportToHypertune()],
    verbose=2,
)
