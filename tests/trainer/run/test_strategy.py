"""Mapping --strategy to a tf.distribute strategy (trainer/run/strategy.py)."""

import pytest
import tensorflow as tf

from trainer.run.strategy import StrategyError, get_strategy


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)


def test_default_is_the_single_device_strategy(no_cluster):
    strategy = get_strategy("default")
    assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1


def test_auto_on_a_cpu_machine_without_cluster_is_the_default(no_cluster):
    assert get_strategy("auto") is tf.distribute.get_strategy()


def test_asking_for_a_tpu_without_one_is_a_clear_error(no_cluster):
    with pytest.raises(StrategyError, match=r"^--strategy tpu: no TPU at 'local' \(TPU_NAME"):
        get_strategy("tpu")


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError, match=r"^--strategy: 'horovod' is not one of auto, default"):
        get_strategy("horovod")
