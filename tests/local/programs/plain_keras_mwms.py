"""A plain multi-worker Keras program, written as TensorFlow's multi-worker tutorial is:
no tf-cluster code, no progress protocol; it reads TF_CONFIG through the strategy and
reports only what Keras prints. Synthetic data instead of a download."""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=20)
opts = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)), keras.layers.Dense(2)])
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
model.fit(data, epochs=opts.epochs, steps_per_epoch=opts.steps, verbose=1)
