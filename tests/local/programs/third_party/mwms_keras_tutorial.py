# Vendored third-party program (test fixture for tf-cluster run-local / smoke).
#
# Source:   https://github.com/tensorflow/docs
#           site/en/tutorials/distribute/multi_worker_with_keras.ipynb
#           commit 7c3650212740204359d4ceae481abc79345541be (HEAD, 2026-03-11;
#           the notebook was last changed by 60c51e7a4b34ff7e02b339b361a5bff7f091cbf8),
#           notebook blob a3710223f177afe28c19b2c16119a2f146422d33
# Title:    "Multi-worker training with Keras"
# License:  Apache-2.0, Copyright 2019 The TensorFlow Authors (licence text below,
#           from the notebook's first code cell).
#
# What is kept, in this order: the notebook's `%%writefile mnist_setup.py` cell,
# its `%%writefile main.py` cell (MultiWorkerMirroredStrategy + model.fit), then the
# "Model saving and loading" cells (the `_is_chief` / `_get_temp_dir` /
# `write_filepath` chief/non-chief temp-dir convention, `model.save` to
# '/tmp/keras-model', and removal of the non-chief copy) and the "Checkpoint saving
# and restoring" cells (tf.train.Checkpoint + CheckpointManager in '/tmp/ckpt' through
# the same convention, non-chief copy removed).
#
# Changes (all other lines are the tutorial's, byte for byte, 2-space indents kept):
# - DATA SOURCE: `tf.keras.datasets.mnist.load_data()` (a download) is replaced by
#   `_synthetic_mnist_load_data()`, added below: random uint8 images of shape
#   (28, 28) in [0, 255] and uint8 labels in [0, 10), MNIST's dtypes and per-example
#   shapes, but 2048 train / 256 test examples instead of 60000 / 10000 (memory), from
#   a fixed seed so that every worker builds the same dataset before auto-sharding.
# - mnist_setup.py and main.py are one file here: `import mnist_setup` is replaced by
#   `mnist_setup = sys.modules[__name__]` (so main.py's `mnist_setup.` calls are kept
#   as written); main.py's duplicate `import os` / `import tensorflow as tf` are kept.
# - Notebook-only cells dropped: pip install, CUDA_VISIBLE_DEVICES, popping TF_CONFIG,
#   sys.path, the single-worker run, the in-notebook TF_CONFIG/subprocess demo, the
#   auto-shard demo, `load_model(...).fit(single_worker_dataset, ...)` (cell 83: it
#   reads the chief's model from every worker) and the restore-and-fit-again cell 89,
#   and the BackupAndRestore variants (they re-create the model and train again).
# - CONSTANT: main.py's `steps_per_epoch=70` -> `steps_per_epoch=10` (no flag exists;
#   epochs=3 kept). With 70, a 2-worker run-local took ~96 s on 2 busy cores: ~40 s of
#   training, then 40-55 s after `on_train_end` before `fit` returned (teardown, not a
#   training step); with 10 the whole program takes ~16 s as two plain processes.
#
#@title Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
# https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# ---- mnist_setup.py ----

import os
import tensorflow as tf
import numpy as np

def _synthetic_mnist_load_data():  # ADDED (vendoring): stands in for the download
  rng = np.random.default_rng(0)
  x_train = rng.integers(0, 256, size=(2048, 28, 28), dtype=np.uint8)
  y_train = rng.integers(0, 10, size=(2048,), dtype=np.uint8)
  x_test = rng.integers(0, 256, size=(256, 28, 28), dtype=np.uint8)
  y_test = rng.integers(0, 10, size=(256,), dtype=np.uint8)
  return (x_train, y_train), (x_test, y_test)

def mnist_dataset(batch_size):
  (x_train, y_train), _ = _synthetic_mnist_load_data()  # CHANGED: was tf.keras.datasets.mnist.load_data()
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = tf.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
  return train_dataset

def build_and_compile_cnn_model():
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(28, 28)),
      tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(10)
  ])
  model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
      metrics=['accuracy'])
  return model

# ---- main.py ----

import os
import json

import tensorflow as tf
import sys  # CHANGED: was `import mnist_setup` (inlined above)
mnist_setup = sys.modules[__name__]

per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()


multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=10)  # CHANGED: was steps_per_epoch=70

# ---- "Model saving and loading" ----

model_path = '/tmp/keras-model'

def _is_chief(task_type, task_id):
  # Note: there are two possible `TF_CONFIG` configurations.
  #   1) In addition to `worker` tasks, a `chief` task type is use;
  #      in this case, this function should be modified to
  #      `return task_type == 'chief'`.
  #   2) Only `worker` task type is used; in this case, worker 0 is
  #      regarded as the chief. The implementation demonstrated here
  #      is for this case.
  # For the purpose of this Colab section, the `task_type` is `None` case
  # is added because it is effectively run with only a single worker.
  return (task_type == 'worker' and task_id == 0) or task_type is None

def _get_temp_dir(dirpath, task_id):
  base_dirpath = 'workertemp_' + str(task_id)
  temp_dir = os.path.join(dirpath, base_dirpath)
  tf.io.gfile.makedirs(temp_dir)
  return temp_dir

def write_filepath(filepath, task_type, task_id):
  dirpath = os.path.dirname(filepath)
  base = os.path.basename(filepath)
  if not _is_chief(task_type, task_id):
    dirpath = _get_temp_dir(dirpath, task_id)
  return os.path.join(dirpath, base)

task_type, task_id = (strategy.cluster_resolver.task_type,
                      strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)

multi_worker_model.save(write_model_path)

if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(os.path.dirname(write_model_path))

# ---- "Checkpoint saving and restoring" ----

checkpoint_dir = '/tmp/ckpt'

checkpoint = tf.train.Checkpoint(model=multi_worker_model)
write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
checkpoint_manager = tf.train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

checkpoint_manager.save()
if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(write_checkpoint_dir)
