"""Evaluator: evaluates each new checkpoint in CHECKPOINT_DIR (tf_keras SidecarEvaluator).

Stops after EPOCHS evaluations, or when the launcher stops it because the chief's
Job finished (SidecarEvaluator otherwise polls forever).
"""

import os

import common
import tensorflow as tf
import tf_keras as keras


def main():
    d = common.dirs()
    model = common.build_model(keras)
    common.compile_model(keras, model)
    x, y = common.make_data(n=1024, seed=11)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(256)
    common.shared_dirs()  # the chief makes them too, at the same time
    evaluator = keras.utils.SidecarEvaluator(
        model=model,
        data=data,
        checkpoint_dir=d["checkpoints"],
        max_evaluations=common.EPOCHS,
        callbacks=[keras.callbacks.TensorBoard(log_dir=os.path.join(d["logs"], "eval"))],
    )
    evaluator.start()
    loss, acc = model.evaluate(data, verbose=0)
    common.emit("RESULT", task="evaluator:0", loss=round(float(loss), 4), accuracy=round(float(acc), 4))


if __name__ == "__main__":
    main()
