"""`shardflow train` (`python -m trainer.task`): flags → config → strategy → train → export.

Trains the manifest's label on the `train` split with model.fit on a tf.distribute strategy
(trainer.run.fit: validation on `eval`, checkpoints and resume), writes MODEL_DIR/metrics.json,
exports the serving SavedModel to MODEL_DIR/export (trainer.run.export) and writes a self-contained
HTML run report (MODEL_DIR/report.html, trainer.run.report). The flags are trainer.flags; the model
inputs are decided once per run (trainer.keras.inputs.Inputs), through a tf.Transform output when
the dataset has one (trainer.keras.transform). A corrupt shard (a CRC or decompression error) fails
the run with a message naming the file; with --skip-corrupt the rest of each corrupt shard is
skipped, and the skipped records are counted in the log and metrics.json. With --profile-input
it only measures the input pipeline and the model step apart and prints the result as a JSON
line (trainer.run.profile). On Vertex AI, the job's output locations apply (trainer.config.
output_dirs). MODEL_DIR is shardflow's only where its run.json says so, one run writes it at a
time, and its outputs are published whole (trainer.run.modeldir); a loss that becomes NaN stops the
run with nothing exported. Exit status: 0 success, 2 for a bad command line or dataset, 1 for a
failed run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Callable

import tensorflow as tf
import tf_keras

from trainer.config import TrainConfig
from trainer.dataset.manifest import Manifest, ManifestError
from trainer.dataset.paths import join
from trainer.dataset.union import load_datasets
from trainer.dataset.verify import verify_shards
from trainer.errors import first_line
from trainer.flags import parse_args
from trainer.keras.inputs import Inputs, check_dataset, corrupt_message, mismatch_message
from trainer.keras.integrity import DatasetChanged, undecodable_image
from trainer.run import modeldir
from trainer.run.callbacks import TrainingDiverged
from trainer.run.evaluate import warnings_of
from trainer.run.export import export_model
from trainer.run.fingerprint import fingerprint
from trainer.run.fit import Trained, history_file, train
from trainer.run.profile import profile_input
from trainer.run.report import HISTORY, REPORT, read_history, render, summarize_manifest
from trainer.run.strategy import StrategyError, get_strategy, is_chief
from transforms.ui.errors import UsageError
from transforms.ui.safe import mask_logs, shown

# Named, not __name__: under `python -m trainer.task` __name__ is "__main__".
logger = logging.getLogger("trainer.task")

Pause = Callable[[str], None]
# The points a run calls its `pause` hook at, in order (tests kill a run there).
POINTS = ("claimed", "checkpoint", "staged", "export-published", "published")


def main(argv: list[str] | None = None, pause: Pause | None = None) -> int:
    """Runs `shardflow train`; returns the exit status. `pause`: see `run`."""
    try:
        cfg = parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mask_logs()
    logging.getLogger("trainer").setLevel(logging.INFO)
    try:
        manifest = load_datasets(cfg.datasets)
        check_dataset(manifest)
    except ManifestError as e:
        _say(str(e))
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
            run(cfg, manifest, pause)
    except (UsageError, ManifestError) as e:
        _say(str(e))
        return 2
    except (DatasetChanged, TrainingDiverged) as e:
        _say(str(e))
        return 1
    except tf.errors.DataLossError as e:
        logger.debug("training failed", exc_info=True)
        _say(corrupt_message(manifest, e))
        return 1
    except tf.errors.InvalidArgumentError as e:
        logger.debug("training failed", exc_info=True)
        mismatch = mismatch_message(manifest, e)
        undecodable = None if mismatch else undecodable_image(manifest, e)
        line = mismatch or undecodable or f"training failed: {first_line(e)}"
        _say(line)
        return 2 if mismatch else 1
    except (StrategyError, tf.errors.OpError) as e:
        logger.debug("training failed", exc_info=True)
        _say(f"training failed: {first_line(e)}")
        return 1
    return 0


def _say(line: str) -> None:
    """One line on stderr, as `shardflow train: LINE`: secrets masked, text from data escaped."""
    print(shown(f"shardflow train: {line}"), file=sys.stderr)


def run(cfg: TrainConfig, manifest: Manifest, pause: Pause | None = None) -> dict:
    """Trains, evaluates and exports; returns the metrics written to metrics.json. `pause`, for
    tests that kill a run at a known point, is called with each point's name (`POINTS`)."""
    modeldir.check_locations(cfg, [*cfg.datasets, *manifest.roots])
    # A folder shardflow did not make is refused before any work. What it holds is read before
    # the cluster starts, when no worker has written to it yet: a worker that is not the chief
    # goes by this (the chief, which writes the folder, reads it again once it holds the lock).
    before = modeldir.read(cfg)
    tf_keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = get_strategy(cfg.strategy)
    chief = is_chief(strategy)
    with modeldir.locked(cfg, chief):
        return _run(cfg, manifest, strategy, chief, before, pause or _no_pause)


def _run(
    cfg: TrainConfig,
    manifest: Manifest,
    strategy: tf.distribute.Strategy,
    chief: bool,
    before: modeldir.Earlier,
    pause: Pause,
) -> dict:
    verify_shards(manifest, cfg.verify)
    inputs = inputs_of(cfg, manifest)
    for note in inputs.notes if chief else ():
        _say(f"warning: {note}")
    earlier = modeldir.claim(cfg, inputs, chief, before)
    pause("claimed")
    if earlier.complete and (cfg.epochs is None or cfg.epochs <= earlier.epochs_trained):
        missing = modeldir.missing_outputs(cfg)
        if not missing:
            print(
                f"{cfg.model_dir} holds this run already, complete ({earlier.epochs_trained} "
                "epochs; export/, metrics.json, report.html): nothing to train. --fresh trains "
                "anew, --epochs N trains on to N epochs"
            )
            return {}
        print(
            f"shardflow train: note: {cfg.model_dir} says its run is complete but lacks "
            f"{', '.join(missing)}: not complete; training again from its last checkpoint "
            f"(to epoch {cfg.epochs or earlier.epochs_trained}) to write its outputs anew",
            file=sys.stderr,
        )
        cfg = dataclasses.replace(cfg, epochs=cfg.epochs or earlier.epochs_trained)
    trained = train(cfg, strategy, inputs, pause)
    mine = fingerprint(cfg, inputs)
    _write_outputs(cfg, inputs, trained, mine, pause)
    if chief:
        modeldir.record(cfg, mine, True, trained.metrics["epochs_trained"])
    return trained.metrics


def _no_pause(point: str) -> None:
    pass


def inputs_of(cfg: TrainConfig, manifest: Manifest) -> Inputs:
    """What the run's model reads, decided once (trainer.keras.inputs.Inputs)."""
    return Inputs.of(
        manifest,
        cfg.skip_corrupt,
        cfg.model,
        exclude=cfg.exclude_features,
        include=cfg.include_features,
        class_weight=cfg.class_weight,
    )


def _write_outputs(
    cfg: TrainConfig, inputs: Inputs, trained: Trained, mine: dict, pause: Pause
) -> None:
    """The SavedModel (every worker: saving is collective); on the chief, metrics.json,
    history.csv and the run report, published whole (trainer.run.modeldir): the export staged and
    renamed into place, then each file written to a temporary file and renamed over the old; a
    worker's temporary folder is removed."""
    if not trained.chief:
        export_model(trained.model, inputs, join(trained.out_dir, modeldir.EXPORT))
        tf.io.gfile.rmtree(trained.out_dir)
        return
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    # What resuming costs: the checkpoint (the model, the optimizer and its step count, which
    # is also the input's position: no input state is saved).
    metrics = trained.metrics
    metrics["checkpoint_bytes"] = _folder_bytes(cfg.checkpoints)
    metrics["warnings"] = [*inputs.notes, *warnings_of(metrics)]
    history = history_file(cfg)
    texts = {
        "metrics.json": json.dumps(metrics, indent=2, sort_keys=True) + "\n",
        HISTORY: _text_of(history),
        REPORT: render(metrics, read_history(history), summarize_manifest(inputs.manifest)),
    }
    try:
        staged = modeldir.staging(cfg, modeldir.EXPORT)
        export_model(trained.model, inputs, staged)
        pause("staged")
        # from here until every output is published the folder holds no complete run
        modeldir.record(cfg, mine, False, metrics["epochs_trained"])
        export_dir = modeldir.publish_folder(cfg, modeldir.EXPORT, staged)
        pause("export-published")
        for name, text in texts.items():
            modeldir.write_text(join(cfg.model_dir, name), text)
        pause("published")
    finally:
        modeldir.discard_staging(cfg)
    out_dir = cfg.model_dir
    report = join(out_dir, REPORT)
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


def _text_of(path: str) -> str:
    """The text of `path`; "" when there is none."""
    if not tf.io.gfile.exists(path):
        return ""
    with tf.io.gfile.GFile(path) as f:
        return f.read()


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
