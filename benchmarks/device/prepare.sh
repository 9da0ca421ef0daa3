#!/usr/bin/env bash
# Puts a TensorFlow stand-in into .device/tf_stub/ for a benchmark host without TensorFlow: the naive Beam pipeline of benchmarks/etl_csv.py (case d of etl_workers.py) needs
# only tf.train.Example. It installs benchmarks/device/tensorflow_stand_in.py as the package
# .device/tf_stub/tensorflow/ (a template here, so that no second `tensorflow` is in the tree) and, beside
# it, TensorFlow's generated Example protos (core/example/example_pb2.py and feature_pb2.py, which
# import only google.protobuf) from the local TensorFlow install.
# Run from the project root, once Beam's wheels for the host are in .device/:
#   bash benchmarks/device/prepare.sh          # PYTHON=... to name the Python that has TensorFlow
# There, benchmarks/etl_workers.py puts .device/tf_stub first on the naive child's PYTHONPATH.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PY=${PYTHON:-.venv/bin/python}
tf=$("$PY" -c 'import importlib.util; print(importlib.util.find_spec("tensorflow").submodule_search_locations[0])')
target=.device/tf_stub/tensorflow
rm -rf .device/tf_stub
mkdir -p "$target/core/example"
cp benchmarks/device/tensorflow_stand_in.py "$target/__init__.py"
cp "$tf/core/example/example_pb2.py" "$tf/core/example/feature_pb2.py" "$target/core/example/"
echo "TensorFlow stand-in in .device/tf_stub ($(du -sh .device/tf_stub | cut -f1)); carry [\".device\"]"
