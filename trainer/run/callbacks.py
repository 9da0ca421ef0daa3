"""The Keras callbacks of a training run (trainer.run.fit): the stop on a non-finite loss, the
step timing (`Throughput`), the best epoch's weights kept (`BestEpoch`), and the pause point the
kill tests use; Keras' warning about slow callbacks is filtered (`quiet_callback_timing`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import tf_keras

logger = logging.getLogger(__name__)


class TrainingDiverged(Exception):
    """The training loss became NaN or infinite; the message says where and what to try."""


class StopOnNonFiniteLoss(tf_keras.callbacks.Callback):
    """Stops the run (TrainingDiverged) at the first step whose loss is NaN or infinite, naming
    the epoch and step: a model trained on is worthless, and exporting it would replace a good
    one."""

    def __init__(self, learning_rate: float):
        super().__init__()
        self._learning_rate = learning_rate
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        raise TrainingDiverged(
            f"the training loss became {float(loss)} at epoch {self._epoch + 1}, step "
            f"{batch + 1}: nothing was exported (an earlier export is untouched); try a lower "
            f"--learning-rate (it was {self._learning_rate:g}), and check the label's values "
            "(huge or extreme values) and the features' ranges"
        )


class PauseAfterCheckpoint(tf_keras.callbacks.Callback):
    """Calls `pause("checkpoint")` at each step's end, after BackupAndRestore (an earlier
    callback) saved its checkpoint there (tests, with --checkpoint-every 1)."""

    def __init__(self, pause: Callable[[str], None]):
        super().__init__()
        self._pause = pause

    def on_train_batch_end(self, batch, logs=None):
        self._pause("checkpoint")


class _CallbackTiming(logging.Filter):
    """Drops Keras' "Callback method ... is slow compared to the batch time" warning. Keras
    times the batch hooks of the first 5 steps whenever a callback of its own making is in the
    list (ours are: Throughput, HistoryLogger); on a CPU those steps take milliseconds, warm-up
    included, and Keras' own TensorBoard callback (about 1 ms a step) sets it off. Nothing for
    the user to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is slow compared to the batch time" not in record.getMessage()


def quiet_callback_timing() -> None:
    keras_log = logging.getLogger("tensorflow")
    if not any(isinstance(f, _CallbackTiming) for f in keras_log.filters):
        keras_log.addFilter(_CallbackTiming())


class Throughput(tf_keras.callbacks.Callback):
    """Times training steps, leaving out the first (tracing) step and validation."""

    def __init__(self) -> None:
        super().__init__()
        # It reads no logs: Keras may pass them on as tensors, not converted to numbers at
        # every batch's end for this callback.
        self._supports_tf_logs = True
        self.first_epoch: int | None = None
        self.last_epoch: int | None = None
        self.initial_step: int | None = None  # the optimizer's steps when fit starts
        self.steps = 0
        self.seconds = 0.0
        self.epoch_steps = 0  # timed steps of the current epoch
        self.epoch_seconds = 0.0
        self._started = 0.0
        self._skip_next = True
        self._steps_per_call = 1

    def on_train_begin(self, logs=None):
        # after BackupAndRestore (an earlier callback) restored a checkpoint
        self.initial_step = int(self.model.optimizer.iterations.numpy())
        # with steps_per_execution N, Keras calls the batch callbacks once every N steps
        steps_per_execution = getattr(self.model, "_steps_per_execution", None)
        self._steps_per_call = (
            1 if steps_per_execution is None else int(steps_per_execution.numpy())
        )

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = epoch
        self.last_epoch = epoch
        self.epoch_steps, self.epoch_seconds = 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._skip_next:
            self._skip_next = False
            return
        seconds = time.perf_counter() - self._started
        self.seconds += seconds
        self.steps += self._steps_per_call
        self.epoch_seconds += seconds
        self.epoch_steps += self._steps_per_call

    def epoch_examples_per_sec(self, batch_size: int) -> float:
        """Of the current epoch's timed steps; NaN when none was timed."""
        if not self.epoch_seconds:
            return math.nan
        return self.epoch_steps * batch_size / self.epoch_seconds


class BestEpoch(tf_keras.callbacks.Callback):
    """Keeps the weights of the epoch with the best `monitor` (lowest) and puts them back when
    training ends, however it ends; with `patience`, stops training after that many epochs
    without a better one. A resumed run starts counting afresh."""

    def __init__(self, monitor: str, patience: int | None):
        super().__init__()
        self.monitor, self.patience = monitor, patience
        self.best = math.inf
        self.best_epoch: int | None = None
        self.best_weights = None
        self.wait = 0
        self.stopped = False
        self.first_epoch: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or math.isnan(float(value)):
            return
        if float(value) < self.best:
            self.best, self.best_epoch, self.wait = float(value), epoch, 0
            self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.patience is not None and self.wait >= self.patience:
            self.stopped = True
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.best_weights is not None:
            self.model.set_weights(self.best_weights)
            logger.info(
                "kept the weights of epoch %d (%s %.6g)%s", self.best_epoch + 1, self.monitor,
                self.best, ": the validation loss stopped improving" if self.stopped else "",
            )  # fmt: skip

    def kept(self, history: dict) -> dict:
        """The logged metrics of the kept epoch (of the last one when none was kept)."""
        epochs = len(next(iter(history.values()), []))
        if not epochs:
            return {}
        first = self.first_epoch or 0
        index = epochs - 1
        if self.best_epoch is not None and 0 <= self.best_epoch - first < epochs:
            index = self.best_epoch - first
        return {k: float(v[index]) for k, v in history.items() if k != "lr"}
