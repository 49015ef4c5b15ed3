"""The benchmarks' training program (run through `--script`, as a user's own program is).

It prints `BENCH {"mark": ..., "t": <wall clock>}` lines so a benchmark can break a run down:
process started, TensorFlow imported, strategy built, first training step done, then the
steady-state steps per second. No tf-cluster code: it reads TF_CONFIG through the strategy.

    --strategy mwms   every task runs Keras `fit` under MultiWorkerMirroredStrategy
                      (no TF_CONFIG: one local task, as the "floor" containers run it)
    --strategy ps     the chief coordinates ParameterServerStrategy (ClusterCoordinator);
                      ps and workers serve until the chart's launcher stops them
"""

import time

T0 = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")


def mark(name, t=None, **extra):
    print("BENCH " + json.dumps({"mark": name, "t": t or time.time(), **extra}), flush=True)


mark("start", T0)
parser = argparse.ArgumentParser()
parser.add_argument("--strategy", choices=("mwms", "ps"), default="mwms")
parser.add_argument("--steps", type=int, default=20, help="training steps after the first")
parser.add_argument("--width", type=int, default=64, help="units of the two hidden layers")
parser.add_argument("--batch", type=int, default=64)
opts = parser.parse_args()

import tensorflow as tf  # noqa: E402

mark("imported")
import tf_keras as keras  # noqa: E402


def model():
    m = keras.Sequential(
        [
            keras.layers.Input(shape=(opts.width,)),
            keras.layers.Dense(opts.width, activation="relu"),
            keras.layers.Dense(opts.width, activation="relu"),
            keras.layers.Dense(4),
        ]
    )
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def data():
    x = tf.random.stateless_normal((1024, opts.width), seed=(1, 2))
    y = tf.random.stateless_uniform((1024,), seed=(3, 4), maxval=4, dtype=tf.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(opts.batch)


def steady(t_first, t_end):
    mark("done", t_end, steps=opts.steps, steps_per_s=round(opts.steps / (t_end - t_first), 3))


def multi_worker_mirrored():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    mark("strategy", replicas=strategy.num_replicas_in_sync)
    with strategy.scope():
        m = model()
    times = {}

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                times["first"] = time.time()
                mark("first_step", times["first"])

    m.fit(data(), epochs=1, steps_per_epoch=opts.steps + 1, callbacks=[Marks()], verbose=0)
    steady(times["first"], time.time())


def parameter_server():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        server = tf.distribute.Server(
            resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, start=True
        )
        mark("serving")
        server.join()
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    mark("strategy", workers=len(resolver.cluster_spec().as_dict().get("worker", [])))
    with strategy.scope():
        m = model()
        optimizer = keras.optimizers.SGD()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    iterator = iter(coordinator.create_per_worker_dataset(lambda: data()))

    @tf.function
    def step(it):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(y, m(x, training=True)))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables, strict=True)
            )
            return loss

        x, y = next(it)
        return strategy.run(replica, args=(x, y))

    coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    t_first = time.time()
    mark("first_step", t_first)
    for _ in range(opts.steps):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    steady(t_first, time.time())


if opts.strategy == "ps":
    parameter_server()
else:
    multi_worker_mirrored()
