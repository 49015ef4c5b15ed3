# Vendored third-party program (test fixture for tf-cluster run-local / smoke).
#
# Source:   https://github.com/kubeflow/training-operator (now kubeflow/trainer)
#           examples/tensorflow/dist-mnist/dist_mnist.py   (blob a443a61dc331aa1da50a8b4dd5e9f84b000c3ce0)
#           examples/tensorflow/mnist_utils.py              (blob 5cd436e376352bb364958d87502ca078d7f09509)
#           tag v1.9.0 = commit 6f74c7f6b2ed6c27aabd82d0a316b23f0646059c; both files were
#           last changed by ec176e3971a296a292edf1c2505a58010a6e0519 ("Update tf job examples
#           to tf v2 (#2270)", 2024-11-04) and are identical on master up to their removal in
#           db3ba9c4c7551b6a3af7c909889323c54818cab6 (2025-01-16) and on release-1.9.
#           The image (examples/tensorflow/dist-mnist/Dockerfile) runs it with
#           TF_USE_LEGACY_KERAS=1 and tf_keras; the TFJob has 1 Chief, 1 PS, 2 Workers.
# License:  Apache-2.0 (dist_mnist.py: Copyright 2016 The TensorFlow Authors;
#           mnist_utils.py: Copyright 2024 The Kubeflow Authors; headers kept below).
#
# What it is: ParameterServerStrategy with TFConfigClusterResolver; worker/ps tasks run
# tf.distribute.Server + join(), the chief coordinates Keras model.fit and then a
# ClusterCoordinator evaluation loop. It writes no checkpoint.
#
# Changes (all other lines are upstream's, byte for byte):
# - mnist_utils.py is inlined above dist_mnist.py (the two files are one --script here);
#   `import mnist_utils as helper` is replaced by `helper = sys.modules[__name__]`, so
#   dist_mnist.py's `helper.` calls are kept as written.
# - DATA SOURCE: the `--fake_data` flag's default is changed from False to True, so the
#   program uses its own in-memory load_fake_data() (random uint8 MNIST-shaped arrays,
#   60000/10000 examples) and never reaches `mnist.load_data()` (a download). Nothing
#   else about the data is changed.
# - No constant changed. Shrink the run with its own flags: `--epochs 1 --batch_size 600`
#   gives steps_per_epoch = 6000 // 600 * 2 = 20 and 10000 // 600 * 2 = 32 eval steps.
#

# ---- examples/tensorflow/mnist_utils.py ----

# Copyright 2024 The Kubeflow Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
"""
Utility functions for loading, preprocessing, and building models for MNIST data.

This module provides functions to load the MNIST dataset, preprocess it into TensorFlow datasets,
and build a simple neural network model using TensorFlow's Keras API.
"""

import numpy as np
import tensorflow as tf
from tensorflow.keras.datasets import mnist


def load_data(fake_data=False, data_path=None, repeat=False):
    """
     Loads the MNIST dataset and converts it into TensorFlow datasets.

    Args:
         fake_data (bool, optional): If `True`, loads a fake dataset for testing purposes.
                           If `False`, loads the real MNIST dataset.
         data_path (str, optional): Path where to cache the dataset locally.
                           If `None`, the dataset is loaded to the default location.
         repeat (bool, optional): If `True`, makes the dataset repeat indefinitely.

     Returns:
         train_ds (tf.data.Dataset): Dataset containing the training data (images and labels).
         test_ds (tf.data.Dataset): Dataset containing the test data (images and labels).
    """
    if fake_data:
        (x_train, y_train), (x_test, y_test) = load_fake_data()
    else:
        (x_train, y_train), (x_test, y_test) = (
            mnist.load_data(path=data_path) if data_path else mnist.load_data()
        )
    # Create TensorFlow datasets from the NumPy arrays
    train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test))
    if repeat:
        return train_ds.repeat(), test_ds.repeat()
    return train_ds, test_ds


def load_fake_data():
    x_train = np.random.randint(0, 256, (60000, 28, 28)).astype(np.uint8)
    y_train = np.random.randint(0, 10, (60000,)).astype(np.uint8)
    x_test = np.random.randint(0, 256, (10000, 28, 28)).astype(np.uint8)
    y_test = np.random.randint(0, 10, (10000,)).astype(np.uint8)

    return (x_train, y_train), (x_test, y_test)


def build_model(dropout=0.9, learning_rate=0.001):
    """
    Builds a simple neural network model using Keras Sequential API.

    Args:
        dropout (float, optional): Keep probability for training dropout.
        learning_rate (float, optional): The learning rate for the Adam optimizer.

    Returns:
        model (tf.keras.Model): The compiled Keras model.
    """
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(
                shape=(28, 28, 1)
            ),  # Input layer with the shape of MNIST images
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(
                128, activation="relu"
            ),  # Dense layer with 128 neurons and ReLU activation
            tf.keras.layers.Dropout(
                1 - dropout
            ),  # Dropout layer to prevent overfitting
            tf.keras.layers.Dense(
                10, activation="softmax"
            ),  # Output layer with 10 neurons (one for each class)
        ]
    )
    # Define an optimizer with a specific learning rate
    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
    # Compile the model with Adam optimizer and sparse categorical crossentropy loss
    model.compile(
        optimizer=optimizer,
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def preprocess(ds, batch_size):
    """
    Preprocesses the dataset by normalizing the images, shuffling, batching, and prefetching.

    Args:
        ds (tf.data.Dataset): The dataset to preprocess (either training or testing data).
        batch_size (int): The number of samples per batch of data.


    Returns:
        ds (tf.data.Dataset): The preprocessed dataset.
    """

    def normalize_img(image, label):
        """
        Normalizes images by scaling pixel values from the range [0, 255] to [0, 1].

        Args:
            image (tf.Tensor): The image tensor.
            label (tf.Tensor): The corresponding label tensor.

        Returns:
            tuple: The normalized image and the corresponding label.
        """
        image = tf.cast(image, tf.float32) / 255.0
        return image, label

    # Map the normalization function across the dataset
    ds = ds.map(normalize_img, num_parallel_calls=tf.data.experimental.AUTOTUNE)
    ds = ds.shuffle(
        buffer_size=10000
    )  # Shuffle the dataset with a buffer size of 10,000
    ds = ds.batch(batch_size)  # Batch the dataset
    ds = ds.prefetch(
        buffer_size=tf.data.experimental.AUTOTUNE
    )  # Prefetch to improve performance.
    return ds


# ---- examples/tensorflow/dist-mnist/dist_mnist.py ----

# Copyright 2016 The TensorFlow Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
"""Distributed MNIST training and validation, with model replicas, using Parameter Server Strategy.

A Sequential model with a Flatten layer, a Dense layer (128 ReLU units),
Dropout for regularization, and a final Dense layer with 10 softmax units for classification.
The parameters (weights and biases) are located on one parameter server (ps), while the ops
are executed on two worker nodes by default. The TF sessions also run on the
worker node.
This script can be run with multiple workers and parameter servers, with at least
one chief, one worker, and one parameter server.

The coordination between the multiple worker invocations occurs due to
the definition of the parameters on the same ps devices. The parameter updates
from one worker is visible to all other workers. As such, the workers can
perform forward computation and gradient calculation in parallel, which
should lead to increased training speed for the simple model.
"""

import argparse
import os
import time

import sys  # CHANGED: was `import mnist_utils as helper` (inlined above)
helper = sys.modules[__name__]
import tensorflow as tf

args = None


def init_parser():
    global args
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--data_path",
        type=str,
        default="mnist.npz",
        help="Path where to cache the dataset locally (relative to ~/.keras/datasets).",
    )
    parser.add_argument(
        "--dropout",
        type=float,
        default=0.9,
        help="Keep probability for training dropout",
    )
    parser.add_argument(
        "--batch_size", type=int, default=100, help="Training batch size"
    )
    parser.add_argument(
        "--learning_rate", type=float, default=0.001, help="Learning rate"
    )
    parser.add_argument(
        "--epochs", type=int, default=5, help="Number of epochs for training"
    )
    parser.add_argument(
        "--fake_data",
        nargs="?",
        const=True,
        type=bool,
        default=True,  # CHANGED: was False (False downloads MNIST)
        help="If true, uses fake data for unit testing.",
    )
    args = parser.parse_args()
    print(f"Run script with {args=}")


def main():
    # Set the environment variable to allow reporting worker and ps failure to the
    # coordinator. This is a workaround and won't be necessary in the future.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"

    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()

    # Get the cluster specification
    cluster_spec = cluster_resolver.cluster_spec()

    # Get the number of PS replicas (parameter servers)
    if "ps" in cluster_spec.jobs:
        num_ps = cluster_spec.num_tasks("ps")
        print(f"Number of PS replicas: {num_ps}")
    else:
        raise Exception("No PS replicas found in the cluster configuration.")

    if cluster_resolver.task_type in ("worker", "ps"):
        # Start a TensorFlow server and wait.
        server = tf.distribute.Server(
            cluster_spec,
            job_name=cluster_resolver.task_type,
            task_index=cluster_resolver.task_id,
            protocol=cluster_resolver.rpc_layer or "grpc",
            start=True,
        )
        server.join()
    else:
        # Run the coordinator.

        # Configure ParameterServerStrategy
        variable_partitioner = (
            tf.distribute.experimental.partitioners.MinSizePartitioner(
                min_shard_bytes=(256 << 10), max_shards=num_ps
            )
        )

        strategy = tf.distribute.ParameterServerStrategy(
            cluster_resolver, variable_partitioner=variable_partitioner
        )

        # Load and preprocess data
        train_ds, test_ds = helper.load_data(
            fake_data=args.fake_data, data_path=args.data_path, repeat=True
        )
        train_ds = helper.preprocess(ds=train_ds, batch_size=args.batch_size)
        test_ds = helper.preprocess(ds=test_ds, batch_size=args.batch_size)

        # Distribute training across workers
        with strategy.scope():
            model = helper.build_model(
                dropout=args.dropout,
                learning_rate=args.learning_rate,
            )

        # Start training
        time_begin = time.time()
        print(f"Training begins @ {time.ctime(time_begin)}")

        model.fit(
            train_ds,
            batch_size=args.batch_size,
            epochs=args.epochs,
            steps_per_epoch=6000 // args.batch_size * 2,
        )

        time_end = time.time()
        print(f"Training ends @ {time.ctime(time_end)}")
        training_time = time_end - time_begin
        print(f"Training elapsed time: {training_time} s")

        # Validation
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            eval_accuracy = tf.keras.metrics.Accuracy()

        @tf.function
        def eval_step(iterator):
            """
            Perform an evaluation step across replicas.

            Args:
                iterator: An iterator for the evaluation dataset.
            """

            def replica_fn(batch_data, labels):
                # Generates output predictions
                pred = model(batch_data, training=False)
                # Get the predicted class by taking the argmax over the class probabilities (axis=1)
                predicted_class = tf.argmax(pred, axis=1, output_type=tf.int64)
                eval_accuracy.update_state(labels, predicted_class)

            batch_data, labels = next(iterator)
            # Run the function on all workers using strategy.run
            strategy.run(replica_fn, args=(batch_data, labels))

        # Prepare the per-worker evaluation dataset and iterator
        per_worker_eval_dataset = coordinator.create_per_worker_dataset(test_ds)
        per_worker_eval_iterator = iter(per_worker_eval_dataset)

        # Calculate evaluation steps per epoch (e.g., based on dataset size and batch size)
        eval_steps_per_epoch = 10000 // args.batch_size * 2

        # Loop through the evaluation steps, scheduling them across the workers
        for _ in range(eval_steps_per_epoch):
            coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))

        # Wait for all scheduled evaluation steps to complete
        coordinator.join()

        # Print the evaluation result (accuracy)
        print("Evaluation accuracy: %f" % eval_accuracy.result())


if __name__ == "__main__":
    init_parser()
    main()
