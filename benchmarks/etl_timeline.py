"""Where a multi-worker `shardflow etl` run spends its time: a timeline of its Beam stages.

It runs `pipelines.etl` in this process, as `python -m pipelines.etl ARGS` would, and records
every bundle that Beam's FnApiRunner hands to a worker: the stage, the worker, when it started
and ended (seconds since this process started). The stages are printed in order with their
span, the busiest and the least busy worker's time in them, and the gaps between stages; the
raw bundles go to `--out-json`. Use it on a machine with many cores to see which stage keeps
workers idle:

  python benchmarks/etl_timeline.py [--out-json PATH] -- --config CFG --output OUT --overwrite \
      --direct_num_workers 16 --direct_running_mode multi_processing
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from pathlib import Path

START = time.monotonic()
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))


def _now() -> float:
    return time.monotonic() - START


def record_bundles(bundles: list[dict]) -> None:
    """Patches BundleManager.process_bundle to append one entry per bundle to `bundles`."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    original = fn_runner.BundleManager.process_bundle
    lock = threading.Lock()

    def process_bundle(self, inputs, *args, **kwargs):
        begin = _now()
        try:
            return original(self, inputs, *args, **kwargs)
        finally:
            worker = getattr(self, "_worker_handler", None)
            entry = {
                "stage": self.bundle_context_manager.stage.name,
                "worker": getattr(worker, "worker_id", "?"),
                "start": round(begin, 3),
                "end": round(_now(), 3),
                "inputs": sum(_size(v) for v in inputs.values()),
            }
            with lock:
                bundles.append(entry)

    fn_runner.BundleManager.process_bundle = process_bundle


def _size(buffer) -> int:
    try:
        return len(buffer)
    except TypeError:
        return 0


def _short(stage: str, width: int = 70) -> str:
    names = [part.split("/")[0] for part in stage.strip("()").split("+") if part]
    unique = list(dict.fromkeys(name.strip("()[]") for name in names))
    text = "+".join(unique)
    return text if len(text) <= width else text[: width - 3] + "..."


def summary(bundles: list[dict], total: float, imported: float) -> str:
    stages: dict[str, list[dict]] = collections.defaultdict(list)
    for bundle in bundles:
        stages[bundle["stage"]].append(bundle)
    order = sorted(stages, key=lambda name: min(b["start"] for b in stages[name]))
    lines = [
        f"imports and set-up done at {imported:.2f} s; run ended at {total:.2f} s",
        f"{'start':>7} {'end':>7} {'span':>6} {'busiest':>8} {'idlest':>7} {'bundles':>7}  stage",
    ]
    previous_end = imported
    for name in order:
        group = stages[name]
        start = min(b["start"] for b in group)
        end = max(b["end"] for b in group)
        busy = collections.Counter()
        for b in group:
            busy[b["worker"]] += b["end"] - b["start"]
        gap = start - previous_end
        if gap > 0.05:
            lines.append(
                f"{previous_end:7.2f} {start:7.2f} {gap:6.2f} {'':>8} {'':>7} {'':>7}  (between)"
            )
        lines.append(
            f"{start:7.2f} {end:7.2f} {end - start:6.2f} {max(busy.values()):8.2f} "
            f"{min(busy.values()):7.2f} {len(group):7d}  {_short(name)}"
        )
        previous_end = max(previous_end, end)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        cut = argv.index("--")
        own, etl_args = argv[:cut], argv[cut + 1 :]
    else:
        own, etl_args = [], argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-json", type=Path)
    args = parser.parse_args(own)

    from pipelines.runner import forkserver

    if forkserver.wanted(etl_args):  # as `shardflow etl` does, before it imports Beam
        forkserver.start()
    from pipelines import etl

    bundles: list[dict] = []
    record_bundles(bundles)
    imported = _now()
    code = etl.run(etl_args)
    total = _now()
    print(summary(bundles, total, imported))
    if args.out_json:
        args.out_json.write_text(
            json.dumps({"imported": imported, "total": total, "exit": code, "bundles": bundles})
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
