"""Maps the --strategy flag to a tf.distribute strategy; the only place strategies are made.

`auto` picks what the machine offers: a TPU when TPU_NAME names one, MultiWorkerMirrored when
TF_CONFIG describes more than one task (as Vertex AI sets it for several replicas), Mirrored when
there is more than one GPU, else the default (single device) strategy. `mirrored` mirrors over
all local GPUs or, without a GPU, over all logical CPU devices (one unless configured otherwise).
`tpu` fails fast, with one line, when the TPU cannot be reached: a `grpc://HOST:PORT` TPU_NAME is
probed with a TCP connection first (TensorFlow's own connection would wait for it forever).
Where Vertex AI describes the cluster only in its own CLUSTER_SPEC, TF_CONFIG is derived from it
(`adopt_cluster_spec`) before a strategy is made.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
from collections.abc import MutableMapping
from urllib.parse import urlsplit

import tensorflow as tf

from trainer.config import STRATEGIES, Accelerator, AcceleratorFlags

logger = logging.getLogger(__name__)

# Seconds to wait for a TCP connection to a grpc:// TPU address before giving up.
TPU_CONNECT_TIMEOUT = 10.0
# Vertex AI's worker pools, in their order in the job, and the TensorFlow task each one runs.
VERTEX_TASK_TYPES = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
}


class StrategyError(RuntimeError):
    """The requested strategy cannot run on this machine."""


def get_strategy(name: str) -> tf.distribute.Strategy:
    """The tf.distribute strategy for a --strategy value."""
    if name not in STRATEGIES:
        raise ValueError(f"--strategy: {name!r} is not one of {', '.join(STRATEGIES)}")
    adopt_cluster_spec(os.environ)
    if name == "auto":
        name = _auto_choice()
        logger.info("--strategy auto chose %s", name)
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return _tpu_strategy()


def strategy_name(strategy: tf.distribute.Strategy) -> str:
    """The public tf.distribute name of a strategy (its class may be a private subclass)."""
    # The classes behind tf.distribute.MultiWorkerMirroredStrategy and .TPUStrategy are named
    # CollectiveAllReduceStrategy and TPUStrategyV2.
    for public, name in (
        (tf.distribute.MultiWorkerMirroredStrategy, "MultiWorkerMirroredStrategy"),
        (tf.distribute.MirroredStrategy, "MirroredStrategy"),
        (tf.distribute.TPUStrategy, "TPUStrategy"),
    ):
        if isinstance(strategy, public):
            return name
    return type(strategy).__name__.lstrip("_")


def tf_config_from_cluster_spec(cluster_spec: str) -> dict:
    """The TF_CONFIG for a Vertex AI CLUSTER_SPEC: its worker pools named as TensorFlow tasks.

    CLUSTER_SPEC is {"cluster": {"workerpool0": ["host:port"], "workerpool1": [...], ...},
    "task": {"type": "workerpool1", "index": 0}, ...}: pool 0 is the chief, pool 1 the workers,
    pool 2 parameter servers, pool 3 evaluators.
    """
    try:
        spec = json.loads(cluster_spec)
        pools, task = spec["cluster"], spec["task"]
        cluster = {VERTEX_TASK_TYPES[pool]: list(hosts) for pool, hosts in pools.items() if hosts}
        return {
            "cluster": cluster,
            "task": {"type": VERTEX_TASK_TYPES[task["type"]], "index": int(task["index"])},
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StrategyError(
            f"CLUSTER_SPEC: not a Vertex AI cluster description ({type(e).__name__}: {e})"
        ) from None


def adopt_cluster_spec(environ: MutableMapping[str, str]) -> dict | None:
    """Sets TF_CONFIG from CLUSTER_SPEC when only CLUSTER_SPEC describes a cluster of more than
    one task; returns the TF_CONFIG set, or None when nothing changed."""
    if environ.get("TF_CONFIG") or not environ.get("CLUSTER_SPEC"):
        return None
    config = tf_config_from_cluster_spec(environ["CLUSTER_SPEC"])
    if sum(len(hosts) for hosts in config["cluster"].values()) < 2:
        return None  # one machine: no cluster for TensorFlow to join
    environ["TF_CONFIG"] = json.dumps(config)
    logger.info("TF_CONFIG set from Vertex AI's CLUSTER_SPEC: %s", environ["TF_CONFIG"])
    return config


def _auto_choice() -> str:
    if os.environ.get("TPU_NAME"):
        return "tpu"
    if _cluster_tasks() > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def _cluster_tasks() -> int:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except (json.JSONDecodeError, AttributeError):
        raise StrategyError("TF_CONFIG: not a JSON object with a `cluster`") from None
    return sum(len(tasks) for tasks in cluster.values())


def _tpu_strategy() -> tf.distribute.TPUStrategy:
    # "local" is the TPU attached to this VM (Cloud TPU VMs, Vertex AI TPU jobs).
    address = os.environ.get("TPU_NAME") or "local"
    try:
        _probe_grpc(address)
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    # OSError: a TPU name is looked up through the GCE metadata server (URLError off GCE).
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StrategyError(
            f"--strategy tpu: no TPU at {address!r} (TPU_NAME, or 'local' when unset): {detail}"
        ) from e
    return tf.distribute.TPUStrategy(resolver)


def _probe_grpc(address: str) -> None:
    """Raises OSError when a grpc://HOST:PORT address does not accept a TCP connection."""
    if not address.startswith("grpc://"):
        return
    url = urlsplit(address)
    if url.hostname is None or url.port is None:
        raise ValueError(f"{address!r} is not grpc://HOST:PORT")
    with socket.create_connection((url.hostname, url.port), timeout=TPU_CONNECT_TIMEOUT):
        pass


# Steps per call into a TPU by default: a TPU step of a small model is far shorter than the
# host's round trip to start it.
TPU_STEPS_PER_EXECUTION = 32


def accelerator_settings(flags: AcceleratorFlags, strategy: tf.distribute.Strategy) -> Accelerator:
    """The flags, with the defaults of `strategy`'s devices for those not given: a TPU runs
    bfloat16 and TPU_STEPS_PER_EXECUTION steps a call (it compiles every step itself); GPUs
    compile the step with XLA; CPUs run as written, in float32."""
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    gpus = not tpu and _on_gpus(strategy)
    return Accelerator(
        jit_compile=False if tpu else (gpus if flags.jit_compile is None else flags.jit_compile),
        mixed_precision=flags.mixed_precision or ("bfloat16" if tpu else "float32"),
        steps_per_execution=flags.steps_per_execution or (TPU_STEPS_PER_EXECUTION if tpu else 1),
    )


def _on_gpus(strategy: tf.distribute.Strategy) -> bool:
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: the first GPU if there is one
        devices = [d.name for d in tf.config.list_logical_devices("GPU")[:1]]
    return any("GPU" in device.upper() for device in devices)


def input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines (one per worker) that share the shards."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return max(1, len(cluster.get("worker", ())) + len(cluster.get("chief", ())))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's outputs: the chief, worker 0 of a cluster without
    one, or the only process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def worker_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    """Where a worker that is not the chief writes: saving is collective, so it must, but to a
    place of its own outside MODEL_DIR (a local temporary folder, removed at the end)."""
    resolver = strategy.cluster_resolver
    return tempfile.mkdtemp(prefix=f"shardflow-{resolver.task_type}-{resolver.task_id}-")
