"""What an export serves, as `shardflow predict` reads it back: the signature's name and the
label file (`assets.extra/label.json`) that says what its outputs mean. TensorFlow's file API
only, no Keras: predicting imports this, not `trainer.run.export`, which writes them.
"""

from __future__ import annotations

import json

import tensorflow as tf

from trainer.dataset.manifest import read_file

SIGNATURE = "serving_default"
LABEL_FILE = "assets.extra/label.json"
TRANSFORM_SIGNATURE = "transform_features"
LABEL_FILE_LIMIT = 1 << 20  # the label's name, task, classes and inputs: kilobytes


def served_label(export_dir: str) -> dict | None:
    """The label an export predicts ({"name", "task", "classes", "inputs"}), or None for an
    export written without `LABEL_FILE`."""
    path = f"{export_dir.rstrip('/')}/{LABEL_FILE}"
    if not tf.io.gfile.exists(path):
        return None
    return json.loads(read_file(path, LABEL_FILE_LIMIT, None, "a training run"))
