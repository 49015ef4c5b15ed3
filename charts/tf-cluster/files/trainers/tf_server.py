"""A TensorFlow server for ps tasks and ParameterServer workers: serve until stopped.

`join()` never returns: the chart's launcher stops this process when the chief's
Job has finished.
"""

import os

os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import common  # noqa: E402,F401  (sets TF env defaults)
import tensorflow as tf  # noqa: E402


def main():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not resolver.task_type:
        common.fail("TF_CONFIG has no task: this script runs as a ps or worker of a cluster")
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True
    )
    print(f"serving {resolver.task_type}:{resolver.task_id} on {server.target}", flush=True)
    server.join()


if __name__ == "__main__":
    main()
