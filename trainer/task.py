"""`shardflow train` (`python -m trainer.task`): flags → config → strategy → train → export.

Trains the manifest's label on the `train` split with model.fit on a tf.distribute strategy
(trainer.fit: validation on `eval`, checkpoints and resume), writes MODEL_DIR/metrics.json,
exports the serving SavedModel to MODEL_DIR/export (trainer.export) and writes a self-contained
HTML run report (MODEL_DIR/report.html, trainer.report). The flags are trainer.flags; the model
inputs are decided once per run (trainer.dataset.Inputs), through a tf.Transform output when the
dataset has one (trainer.transform). A corrupt shard (a CRC or decompression error) fails the
run with a message naming the file; with --skip-corrupt the rest of each corrupt shard is
skipped, and the skipped records are counted in the log and metrics.json. With --profile-input
it only measures the input pipeline and the model step apart and prints the result as a JSON
line (trainer.profile). On Vertex AI, the job's output locations apply (trainer.config.
output_dirs). Exit status: 0 success, 2 for a bad command line or dataset, 1 for a failed run.
"""

from __future__ import annotations

import json
import logging
import sys

import tensorflow as tf
import tf_keras

from trainer import modeldir
from trainer.config import TrainConfig
from trainer.dataset import Inputs, check_dataset, corrupt_message, mismatch_message
from trainer.errors import first_line
from trainer.evaluate import warnings_of
from trainer.export import export_model
from trainer.fit import Trained, is_chief, train
from trainer.flags import parse_args
from trainer.integrity import DatasetChanged, undecodable_image, verify_shards
from trainer.manifest import Manifest, ManifestError
from trainer.paths import join
from trainer.profile import profile_input
from trainer.report import HISTORY, summarize_manifest, write_report
from trainer.strategy import StrategyError, get_strategy
from trainer.union import load_datasets
from transforms.ui.errors import UsageError

# Named, not __name__: under `python -m trainer.task` __name__ is "__main__".
logger = logging.getLogger("trainer.task")


def main(argv: list[str] | None = None) -> int:
    """Runs `shardflow train`; returns the exit status."""
    try:
        cfg = parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO)
    try:
        manifest = load_datasets(cfg.datasets)
        check_dataset(manifest)
    except ManifestError as e:
        print(f"shardflow train: {e}", file=sys.stderr)
        return 2
    if manifest.limit is not None:
        print(
            f"shardflow train: note: {manifest.root} is partial (`etl --limit "
            f"{manifest.limit}`): the first {manifest.limit} records of each source",
            file=sys.stderr,
        )
    try:
        if cfg.profile_input:
            tf_keras.utils.set_random_seed(cfg.seed)
            verify_shards(manifest, cfg.verify)
            print(json.dumps(profile_input(cfg, inputs_of(cfg, manifest))), flush=True)
        else:
            run(cfg, manifest)
    except (UsageError, ManifestError) as e:
        print(f"shardflow train: {e}", file=sys.stderr)
        return 2
    except DatasetChanged as e:
        print(f"shardflow train: {e}", file=sys.stderr)
        return 1
    except tf.errors.DataLossError as e:
        logger.debug("training failed", exc_info=True)
        print(f"shardflow train: {corrupt_message(manifest, e)}", file=sys.stderr)
        return 1
    except tf.errors.InvalidArgumentError as e:
        logger.debug("training failed", exc_info=True)
        mismatch = mismatch_message(manifest, e)
        undecodable = None if mismatch else undecodable_image(manifest, e)
        line = mismatch or undecodable or f"training failed: {first_line(e)}"
        print(f"shardflow train: {line}", file=sys.stderr)
        return 2 if mismatch else 1
    except (StrategyError, tf.errors.OpError) as e:
        logger.debug("training failed", exc_info=True)
        print(f"shardflow train: training failed: {first_line(e)}", file=sys.stderr)
        return 1
    return 0


def run(cfg: TrainConfig, manifest: Manifest) -> dict:
    """Trains, evaluates and exports; returns the metrics written to metrics.json."""
    tf_keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = get_strategy(cfg.strategy)
    verify_shards(manifest, cfg.verify)
    inputs = inputs_of(cfg, manifest)
    chief = is_chief(strategy)
    for note in inputs.notes if chief else ():
        print(f"shardflow train: warning: {note}", file=sys.stderr)
    earlier = modeldir.claim(cfg, inputs, chief)
    if earlier.complete and (cfg.epochs is None or cfg.epochs <= earlier.epochs_trained):
        print(
            f"{cfg.model_dir} holds this run already, complete ({earlier.epochs_trained} epochs; "
            "export/, metrics.json, report.html): nothing to train. --fresh trains anew, "
            "--epochs N trains on to N epochs"
        )
        return {}
    trained = train(cfg, strategy, inputs)
    _write_outputs(cfg, inputs, trained)
    if chief:
        epochs = trained.metrics["epochs_trained"]
        modeldir.record(cfg, modeldir.fingerprint(cfg, inputs), True, epochs)
    return trained.metrics


def inputs_of(cfg: TrainConfig, manifest: Manifest) -> Inputs:
    """What the run's model reads, decided once (trainer.dataset.Inputs)."""
    return Inputs.of(
        manifest,
        cfg.skip_corrupt,
        cfg.model,
        exclude=cfg.exclude_features,
        include=cfg.include_features,
        class_weight=cfg.class_weight,
    )


def _write_outputs(cfg: TrainConfig, inputs: Inputs, trained: Trained) -> None:
    """The SavedModel (every worker: saving is collective); metrics.json and the run report
    (the chief); a worker's temporary folder is removed."""
    out_dir = trained.out_dir
    export_dir = export_model(trained.model, inputs, join(out_dir, "export"))
    if not trained.chief:
        tf.io.gfile.rmtree(out_dir)
        return
    # What resuming costs: the checkpoint (the model, the optimizer and its step count, which
    # is also the input's position: no input state is saved).
    metrics = trained.metrics
    metrics["checkpoint_bytes"] = _folder_bytes(cfg.checkpoints)
    metrics["warnings"] = [*inputs.notes, *warnings_of(metrics)]
    with tf.io.gfile.GFile(join(out_dir, "metrics.json"), "w") as f:
        f.write(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    report = write_report(out_dir, metrics, summarize_manifest(inputs.manifest))
    print(f"model exported to {export_dir}")
    print(f"metrics written to {join(out_dir, 'metrics.json')} (per-epoch history in "
          f"{join(out_dir, HISTORY)})")  # fmt: skip
    print(f"checkpoints in {cfg.checkpoints}")
    if trained.logs_dir:
        print(f"TensorBoard logs in {trained.logs_dir}")
    for line in result_lines(metrics):
        print(line)
    for warning in metrics["warnings"]:
        print(f"warning: {warning}")
    print(f"run report written to {report}")


def result_lines(metrics: dict) -> list[str]:
    """The eval and test metrics beside the baseline's, a line per split."""
    lines = []
    missing = sum((metrics.get("records_without_label") or {}).values())
    if missing:
        per_split = ", ".join(
            f"{split} {n}" for split, n in sorted(metrics["records_without_label"].items()) if n
        )
        lines.append(f"records without the label, left out: {missing} ({per_split})")
    best = metrics.get("best_epoch")
    if best is not None:
        watched = "validation" if metrics.get("validation") else "train"
        if metrics.get("stopped_early"):
            how = f"the {watched} loss stopped improving"
        elif metrics.get("early_stopping"):
            how = "the cap for this dataset"
        else:
            how = "--epochs"
        lines.append(
            f"trained {metrics.get('epochs_trained')} epochs ({how}); kept epoch {best}, the "
            f"best {watched} loss"
        )
    for split in ("eval", "test"):
        scored = metrics.get(split) or {}
        if "baseline_accuracy" in scored:
            lines.append(
                f"{split}: accuracy {scored['accuracy']:.4f}, macro F1 {scored['macro_f1']:.4f} "
                f"(baseline, the majority class: accuracy {scored['baseline_accuracy']:.4f}); "
                f"{scored['records']} records"
            )
        elif "baseline_mae" in scored:
            lines.append(
                f"{split}: MAE {scored['mae']:.4g}, RMSE {scored['rmse']:.4g}, R² "
                f"{scored['r2']:.4f} (baseline, the train mean: MAE {scored['baseline_mae']:.4g}, "
                f"RMSE {scored['baseline_rmse']:.4g}); {scored['records']} records"
            )
    return lines


def _folder_bytes(folder: str) -> int:
    """The bytes of the files under `folder` (local or gs://); 0 when it does not exist."""
    if not tf.io.gfile.exists(folder):
        return 0
    return sum(
        tf.io.gfile.stat(join(root, name)).length
        for root, _, names in tf.io.gfile.walk(folder)
        for name in names
    )


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
