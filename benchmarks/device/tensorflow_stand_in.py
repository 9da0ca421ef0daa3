"""A stand-in for TensorFlow that holds only `tf.train.Example` and the messages inside it.

The naive Beam pipeline of benchmarks/etl_csv.py needs nothing else of TensorFlow (it writes with
Beam's WriteToTFRecord), so on a machine without TensorFlow it runs with this package first on
its path. TensorFlow's two generated proto modules, which need only protobuf, go beside it:
benchmarks/device/prepare.sh installs this file as .device/tf_stub/tensorflow/__init__.py and
copies them there. It is kept here under another name so that the tree holds no second package
named `tensorflow` (tools that resolve the trainer's `import tensorflow` would find it).
"""

import types

from tensorflow.core.example.example_pb2 import Example
from tensorflow.core.example.feature_pb2 import BytesList, Feature, Features, FloatList, Int64List

train = types.SimpleNamespace(
    Example=Example,
    Features=Features,
    Feature=Feature,
    BytesList=BytesList,
    FloatList=FloatList,
    Int64List=Int64List,
)
