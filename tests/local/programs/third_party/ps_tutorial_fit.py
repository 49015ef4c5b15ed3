# Vendored third-party program (test fixture for tf-cluster run-local / smoke).
#
# Source:   https://github.com/tensorflow/docs
#           site/en/tutorials/distribute/parameter_server_training.ipynb
#           commit 7c3650212740204359d4ceae481abc79345541be (HEAD, 2026-03-11;
#           the notebook was last changed by 60c51e7a4b34ff7e02b339b361a5bff7f091cbf8),
#           notebook blob 820e98e9bd3e6255ae687f4d24f741b3acff70ed
# Title:    "Parameter server training with ParameterServerStrategy"
# License:  Apache-2.0, Copyright 2020 The TensorFlow Authors (licence text below,
#           from the notebook's first code cell).
#
# What is kept: the code cells of the "Model.fit" path, in notebook order -- setup
# imports (cell id GlI_NAVFae3J), GRPC_FAIL_FAST (FbrP5pXuaoVH), the strategy with
# its MinSizePartitioner (_YyEPgisrC35), the input data (shAo1CCS7wU1, already
# synthetic in the tutorial: tf.random.uniform), the model (PhTHUYaD74vT), and the
# callbacks + fit with the tutorial's own working_dir "/tmp/my_working_dir"
# (3ddUvUZk7_wm) -- ModelCheckpoint saves the whole model to /tmp/my_working_dir/ckpt
# every epoch, BackupAndRestore backs up to /tmp/my_working_dir/backup.
# The /tmp path is deliberate: on Kubernetes the ps tasks run the save ops of the
# variables they hold and cannot see the chief's /tmp.
#
# Changes (all other lines are the tutorial's, byte for byte, 2-space indents kept):
# - Dropped the notebook-only `!pip install portpicker` cell.
# - Setup imports: removed `multiprocessing`, `portpicker` and `random`, which only the
#   in-process cluster and the custom-training-loop part use.
# - Replaced the "In-process cluster" cell (create_in_process_cluster, portpicker,
#   NUM_WORKERS = 3 / NUM_PS = 2 constants) with the tutorial's "Clusters in the real
#   world" / "If you use the same binary for all tasks" code: read TF_CONFIG with
#   tf.distribute.cluster_resolver.TFConfigClusterResolver(); "worker" and "ps" tasks
#   start tf.distribute.Server(..., start=True) and server.join() (code copied from
#   that section); the "chief" task runs the coordinator code below.
# - NUM_PS (used by the partitioner's max_shards) is taken from the cluster spec
#   instead of the constant 2.
# - An "evaluator" task exits with an error: the tutorial's sidecar evaluation is
#   pseudo-code only (no complete cell), so it is not vendored.
# - Omitted everything after `model.fit` (optional ClusterCoordinator usage, the
#   custom training loop, inline evaluation, sidecar evaluation).
# - Code moved under if/else branches is re-indented by one level (2 spaces).
# - No epoch/step change: the tutorial's own epochs=5, steps_per_epoch=20,
#   steps_per_execution=10 are already small.
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

#@title
import os
import tensorflow as tf

# Set the environment variable to allow reporting worker and ps failure to the
# coordinator. This is a workaround and won't be necessary in the future.
os.environ["GRPC_FAIL_FAST"] = "use_caller"

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
  # Start a TensorFlow server and wait.
  server = tf.distribute.Server(
      cluster_resolver.cluster_spec(),
      job_name=cluster_resolver.task_type,
      task_index=cluster_resolver.task_id,
      protocol=cluster_resolver.rpc_layer or "grpc",
      start=True)
  server.join()
elif cluster_resolver.task_type == "evaluator":
  # Run sidecar evaluation
  raise SystemExit("sidecar evaluation is not part of this vendored program")
else:
  # Run the coordinator.
  NUM_PS = cluster_resolver.cluster_spec().num_tasks("ps")

  variable_partitioner = (
      tf.distribute.experimental.partitioners.MinSizePartitioner(
          min_shard_bytes=(256 << 10),
          max_shards=NUM_PS))

  strategy = tf.distribute.ParameterServerStrategy(
      cluster_resolver,
      variable_partitioner=variable_partitioner)

  global_batch_size = 64

  x = tf.random.uniform((10, 10))
  y = tf.random.uniform((10,))

  dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat()
  dataset = dataset.batch(global_batch_size)
  dataset = dataset.prefetch(2)

  with strategy.scope():
    model = tf.keras.models.Sequential([tf.keras.layers.Dense(10)])

    model.compile(tf.keras.optimizers.legacy.SGD(), loss="mse", steps_per_execution=10)

  working_dir = "/tmp/my_working_dir"
  log_dir = os.path.join(working_dir, "log")
  ckpt_filepath = os.path.join(working_dir, "ckpt")
  backup_dir = os.path.join(working_dir, "backup")

  callbacks = [
      tf.keras.callbacks.TensorBoard(log_dir=log_dir),
      tf.keras.callbacks.ModelCheckpoint(filepath=ckpt_filepath),
      tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
  ]

  model.fit(dataset, epochs=5, steps_per_epoch=20, callbacks=callbacks)
