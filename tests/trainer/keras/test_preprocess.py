"""The host/device split (trainer/keras/preprocess.py) and the accelerator settings: strings stay in
the input pipeline, the device model sees numbers only, compiles with XLA and computes in mixed
precision."""

from __future__ import annotations

import json
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests.trainer.datasets import FEATURES, make_rows, to_example
from trainer.config import Accelerator, AcceleratorFlags, ModelConfig
from trainer.dataset.manifest import ManifestError, load_manifest
from trainer.flags import parse_args
from trainer.keras.features import dense_inputs, parse_spec
from trainer.keras.inputs import Inputs
from trainer.keras.layers import SeededDropout
from trainer.keras.model import CPU, build_model
from trainer.recipe.kinds import EXCLUDED, KEY, NOT_AN_INPUT
from trainer.recipe.sizing import Sizing
from trainer.recipe.words import CATEGORY, FROM_VALUES, FROM_VOCABULARY, NUMBER, PRESENCE, TOKENS
from trainer.run.callbacks import Throughput
from trainer.run.strategy import TPU_STEPS_PER_EXECUTION, accelerator_settings

SMALL = ModelConfig(hidden_units=(8,), embedding_dim=2, hash_bins=16, one_hot_max=2)


@pytest.fixture(scope="module")
def inputs(dataset) -> Inputs:
    return Inputs.of(load_manifest(str(dataset.root)), model=SMALL)


def _model(inputs: Inputs, accelerator: Accelerator = CPU) -> tf_keras.Model:
    return build_model(inputs.recipe, SMALL, accelerator)


def _batches(inputs: Inputs, batch_size: int = 32) -> tf.data.Dataset:
    return inputs.dataset("train", batch_size, shuffle=False, drop_remainder=True)


def _string_ops(graph: tf.Graph) -> list[str]:
    """The ops of `graph` (and of the functions it calls) with a string output."""
    found = []
    for op in graph.get_operations():
        if any(t.dtype == tf.string for t in op.outputs):
            found.append(f"{op.type} {op.name}")
    for function in graph._functions.values():  # noqa: SLF001 - the graph's nested functions
        found += _string_ops(function.graph) if hasattr(function, "graph") else []
    return found


def test_every_model_input_is_a_number_and_says_what_it_is(inputs):
    described = {i.name: (i.kind, i.dtype, i.shape, i.vocabulary_size, i.ids)
                 for i in inputs.host.inputs}  # fmt: skip
    assert described == {
        "id": (NUMBER, tf.float32, (), None, None),
        "bill_length_mm": (NUMBER, tf.float32, (), None, None),
        "flipper_mm": (NUMBER, tf.float32, (), None, None),
        "body_mass_g": (NUMBER, tf.float32, (), None, None),
        "body_mass_g__present": (PRESENCE, tf.float32, (), None, None),
        "year": (CATEGORY, tf.int32, (1,), 4, FROM_VALUES),  # 3 values and "not one of them"
        "island": (CATEGORY, tf.int32, (1,), 4, FROM_VALUES),
        "sex": (CATEGORY, tf.int32, (1,), 3, FROM_VOCABULARY),  # its 2 train values and "other"
        "tags": (TOKENS, tf.int32, (None,), 7, FROM_VOCABULARY),  # 5 tokens, "other", padding
        "embedding": (NUMBER, tf.float32, (4,), None, None),
    }
    features, _ = next(iter(_batches(inputs)))
    assert {k: v.dtype for k, v in features.items()} == {
        i.name: i.dtype for i in inputs.host.inputs
    }


def test_the_host_maps_values_to_their_index_and_unknown_values_to_zero(inputs):
    host = inputs.host
    dense = {
        "id": tf.constant([1, 2], tf.int64),
        "bill_length_mm": tf.constant([40.0, 41.0]),
        "flipper_mm": tf.constant([200.0, 210.0]),
        "body_mass_g": tf.constant([3000.0, 0.0]),
        "body_mass_g__present": tf.constant([1.0, 0.0]),
        "year": tf.constant([2009, 1999], tf.int64),
        "island": tf.constant([b"Dream", b"Atlantis"]),
        "sex": tf.constant([b"male", b"male"]),
        "tags": tf.constant([[b"a", b""], [b"b", b"c"]]),
        "embedding": tf.zeros([2, 4]),
    }
    out = host(dense)
    island_values = FEATURES["island"]["values"]
    assert out["year"].numpy().tolist() == [[3], [0]]
    assert out["island"].numpy().tolist() == [[island_values.index("Dream") + 1], [0]]
    sex = out["sex"].numpy()
    assert sex[0, 0] == sex[1, 0] and 1 <= sex[0, 0] < 3  # one of the two train values
    tags = out["tags"].numpy()
    assert tags.tolist() == [[1, 0], [1, 1]]  # tokens train never held: 1; "" is padding: 0
    assert out["id"].dtype == tf.float32 and out["id"].numpy().tolist() == [1.0, 2.0]


def test_the_train_step_compiles_with_xla_on_cpu(inputs):
    # XLA has no string kernels: a lookup or a hash left in the model fails to compile here.
    xla = Accelerator(jit_compile=True, mixed_precision="float32", steps_per_execution=1)
    sizing = Sizing(batch_size=32, max_epochs=1, dropout=0.1)  # dropout's counter compiles too
    model = build_model(inputs.recipe, SMALL, xla, sizing=sizing)
    history = model.fit(_batches(inputs).repeat(), steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert model._jit_compile is True  # noqa: SLF001 - what compile() was given


def test_the_device_graph_holds_no_string_tensor_and_the_host_graph_does(inputs):
    model = _model(inputs)
    features, labels = next(iter(_batches(inputs)))
    feature_spec = {k: tf.TensorSpec([None, *v.shape[1:]], v.dtype) for k, v in features.items()}
    label_spec = tf.TensorSpec([None], labels.dtype)
    step = tf.function(model.train_step).get_concrete_function((feature_spec, label_spec))
    assert _string_ops(step.graph) == []
    assert len(step.graph.get_operations()) > 100  # the whole step: forward, loss, gradients

    host_spec = {k: tf.TensorSpec(t.shape, t.dtype) for k, t in inputs.host.model.input.items()}
    host = tf.function(inputs.host.model).get_concrete_function(host_spec)
    assert _string_ops(host.graph)  # the lookups and hashes run here, on the host


def test_dropout_masks_follow_the_seed_and_a_count_kept_with_the_weights():
    layer = SeededDropout(0.5, seed=3)
    x = tf.ones([4, 64])
    first, second = layer(x, training=True), layer(x, training=True)
    assert not np.array_equal(first, second)  # a new mask every call
    assert set(np.unique(first.numpy())) == {0.0, 2.0}
    assert int(layer.calls.numpy()) == 2 and layer.calls in layer.weights  # saved, restored
    again = SeededDropout(0.5, seed=3)
    np.testing.assert_array_equal(again(x, training=True), first)  # the same seed and count
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_bfloat16_computes_in_bfloat16_and_keeps_weights_normalization_and_outputs_in_float32(
    inputs,
):
    mixed = Accelerator(jit_compile=False, mixed_precision="bfloat16", steps_per_execution=1)
    model = _model(inputs, mixed)
    assert tf_keras.mixed_precision.global_policy().name == "float32"  # restored
    assert model.get_layer("hidden_0").compute_dtype == "bfloat16"
    assert model.get_layer("hidden_0").kernel.dtype == tf.float32
    assert model.get_layer("numbers").compute_dtype == "float32"
    features, _ = next(iter(_batches(inputs)))
    probabilities = model(features, training=False)
    assert probabilities.dtype == tf.float32
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, rtol=1e-5)
    model.fit(_batches(inputs).repeat(), steps_per_epoch=2, epochs=1, verbose=0)


def test_float16_scales_the_loss(inputs):
    half = Accelerator(jit_compile=False, mixed_precision="float16", steps_per_execution=1)
    model = _model(inputs, half)
    assert isinstance(model.optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    history = model.fit(_batches(inputs).repeat(), steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])


def test_steps_per_execution_runs_several_steps_a_call_and_the_throughput_counts_them(inputs):
    four = Accelerator(jit_compile=False, mixed_precision="float32", steps_per_execution=4)
    model = _model(inputs, four)
    throughput = Throughput()
    model.fit(
        _batches(inputs).repeat(), steps_per_epoch=12, epochs=1, verbose=0, callbacks=[throughput]
    )
    assert int(model.optimizer.iterations.numpy()) == 12
    assert throughput.steps == 8  # 3 calls of 4 steps; the first (tracing) one is not timed


def test_accelerator_defaults_follow_the_devices_and_flags_win():
    cpu = tf.distribute.get_strategy()
    assert accelerator_settings(AcceleratorFlags(), cpu) == CPU
    gpus = types.SimpleNamespace(
        extended=types.SimpleNamespace(worker_devices=("/job:localhost/device:GPU:0",))
    )  # no GPU here: a stand-in for a strategy over one
    assert accelerator_settings(AcceleratorFlags(), gpus).jit_compile is True
    flags = AcceleratorFlags(jit_compile=False, mixed_precision="float16", steps_per_execution=8)
    assert accelerator_settings(flags, gpus) == Accelerator(False, "float16", 8)
    assert TPU_STEPS_PER_EXECUTION > 1


def test_the_accelerator_flags_parse():
    common = ["--data", "d", "--model-dir", "m"]
    assert parse_args(common, environ={}).accelerator == AcceleratorFlags()
    cfg = parse_args(
        common + ["--jit-compile", "--mixed-precision", "bfloat16", "--steps-per-execution", "16"],
        environ={},
    )
    assert cfg.accelerator == AcceleratorFlags(True, "bfloat16", 16)
    assert parse_args(common + ["--no-jit-compile"], environ={}).accelerator.jit_compile is False
    with pytest.raises(SystemExit):
        parse_args(common + ["--mixed-precision", "int8"], environ={})


def test_serving_applies_the_same_host_preprocessing_as_training(inputs, tmp_path):
    from trainer.run.export import export_model

    model = _model(inputs)
    export_model(model, inputs, str(tmp_path / "export"))
    serve = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    without_label = {k: v for k, v in FEATURES.items() if k != "species"}
    examples = tf.constant(
        [to_example(r, without_label).SerializeToString() for r in make_rows(8, seed=3)]
    )
    m = inputs.manifest
    spec = parse_spec(m, include_label=False, only=[f.name for f in inputs.recipe.used])
    trained_on = inputs.host(dense_inputs(tf.io.parse_example(examples, spec), m.features))
    np.testing.assert_allclose(
        serve(examples=examples)["probabilities"], model(trained_on), rtol=1e-5, atol=1e-6
    )


def _with_key(dataset, tmp_path, key: str):
    root = tmp_path / "keyed"
    shutil.copytree(dataset.root, root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["key"] = key
    (root / "manifest.json").write_text(json.dumps(manifest))
    return load_manifest(str(root))


def test_the_key_is_never_a_model_input_and_excluded_features_are_not_either(dataset, tmp_path):
    m = _with_key(dataset, tmp_path, "id")
    inputs = Inputs.of(m, model=SMALL, exclude=("sex", "tags"))
    names = [i.name for i in inputs.host.inputs]
    assert "id" not in names and "sex" not in names and "tags" not in names
    assert inputs.recipe.reasons == {"id": KEY, "sex": EXCLUDED, "tags": EXCLUDED,
                                         "photo": NOT_AN_INPUT["image"]}  # fmt: skip
    features, _ = next(iter(_batches(inputs)))
    assert sorted(features) == sorted(names)
    # without the key, the id was a number the model learned from
    assert "id" in [i.name for i in Inputs.of(load_manifest(str(dataset.root))).host.inputs]


def test_excluding_an_unknown_feature_or_the_label_is_an_error(dataset):
    m = load_manifest(str(dataset.root))
    with pytest.raises(ManifestError, match="--exclude-features: no feature 'sx'"):
        Inputs.of(m, exclude=("sx",))
    with pytest.raises(ManifestError, match="'species' is the label"):
        Inputs.of(m, exclude=("species",))
    common = ["--data", "d", "--model-dir", "m"]
    assert parse_args(common + ["--exclude-features", "a, b"], environ={}).exclude_features == (
        "a",
        "b",
    )


def test_images_are_decoded_resized_and_scaled_on_the_host_and_a_missing_one_is_zeros():
    import io

    from PIL import Image

    from trainer.keras.preprocess import DecodeImages

    pixels = np.zeros((4, 6, 3), np.uint8)
    pixels[:, :3] = (255, 0, 0)  # left half red, right half black
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    decoded = DecodeImages(2, 2, 3)(tf.constant([out.getvalue(), b""])).numpy()
    assert decoded.shape == (2, 2, 2, 3) and decoded.dtype == np.float32
    np.testing.assert_allclose(decoded[0, :, 0], [[1.0, 0, 0], [1.0, 0, 0]])  # red left half
    np.testing.assert_allclose(decoded[0, :, 1], [[0.0, 0, 0], [0.0, 0, 0]])  # black right half
    assert (decoded[1] == 0).all()
    assert DecodeImages.from_config(DecodeImages(2, 2, 3).get_config()).channels == 3
