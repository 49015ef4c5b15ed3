"""A classic TF1 between-graph trainer (tf.compat.v1), as many older scripts are.

Reads --ps_hosts/--worker_hosts/--job_name/--task_index (or the PS_HOSTS,
WORKER_HOSTS, JOB_NAME, TASK_INDEX env the chart exports with legacyTF1.env).
ps tasks serve forever (the launcher stops them); worker 0 is the chief and
writes checkpoints to CHECKPOINT_DIR. Trains a softmax classifier on the
generated data for TRAIN_STEPS global steps.
"""

import argparse
import os

import common
import tensorflow as tf


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--ps_hosts", default=os.environ.get("PS_HOSTS", ""))
    p.add_argument("--worker_hosts", default=os.environ.get("WORKER_HOSTS", ""))
    p.add_argument("--job_name", default=os.environ.get("JOB_NAME", ""))
    p.add_argument("--task_index", type=int, default=int(os.environ.get("TASK_INDEX", "0")))
    a = p.parse_args()
    if not (a.worker_hosts and a.job_name in ("ps", "worker")):
        common.fail("need --worker_hosts and --job_name ps|worker (or legacyTF1.flags / legacyTF1.env)")
    return a


def main():
    a = args()
    tf.compat.v1.disable_eager_execution()
    spec = {"worker": a.worker_hosts.split(",")}
    if a.ps_hosts:
        spec["ps"] = a.ps_hosts.split(",")
    cluster = tf.train.ClusterSpec(spec)
    server = tf.distribute.Server(cluster, job_name=a.job_name, task_index=a.task_index)
    if a.job_name == "ps":
        print(f"ps {a.task_index} serving on {server.target}", flush=True)
        server.join()
        return
    steps = int(os.environ.get("TRAIN_STEPS", "200"))
    is_chief = a.task_index == 0
    x_all, y_all = common.make_data()
    with tf.compat.v1.device(
        tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{a.task_index}", cluster=cluster)
    ):
        x = tf.compat.v1.placeholder(tf.float32, [None, common.FEATURES])
        y = tf.compat.v1.placeholder(tf.int64, [None])
        w = tf.compat.v1.get_variable(
            "w", [common.FEATURES, common.CLASSES], initializer=tf.compat.v1.zeros_initializer()
        )
        b = tf.compat.v1.get_variable("b", [common.CLASSES], initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
    ckpt_dir = common.dirs()["checkpoints"] if is_chief else None
    rng = __import__("numpy").random.default_rng(a.task_index)
    step, loss_value, acc = 0, 0.0, 0.0
    # Each worker talks only to the ps and itself: without this filter a worker blocks on
    # peers that may already have finished (the classic between-graph hang).
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{a.task_index}"])
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, config=config, checkpoint_dir=ckpt_dir, hooks=hooks
    ) as sess:
        last_report = -1
        while not sess.should_stop():
            idx = rng.integers(0, len(x_all), size=common.BATCH_SIZE)
            _, step, loss_value, acc = sess.run(
                [train_op, global_step, loss, accuracy], feed_dict={x: x_all[idx], y: y_all[idx]}
            )
            if step // 50 != last_report:
                last_report = step // 50
                common.emit(
                    "PROGRESS",
                    epoch=int(min(step, steps)),
                    epochs=steps,
                    loss=round(float(loss_value), 4),
                    accuracy=round(float(acc), 4),
                )
    common.emit(
        "RESULT",
        task=f"worker:{a.task_index}",
        chief=is_chief,
        global_step=int(step),
        loss=round(float(loss_value), 4),
        accuracy=round(float(acc), 4),
        model_dir=ckpt_dir,
    )


if __name__ == "__main__":
    main()
