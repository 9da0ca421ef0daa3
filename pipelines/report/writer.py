"""report.html written next to a published dataset, from what it holds (its manifest,
statistics, facts and rejected records) and the job's graph and timings."""

from __future__ import annotations

import json
import logging
import time

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.facts import Facts
from transforms.contract.layout import MANIFEST, REPORT
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.records import Rejected
from transforms.sink.storage import write_atomically

logger = logging.getLogger(__name__)


def write_report(output: str, graph: dict, timings: dict) -> None:
    """Writes OUTPUT/report.html from the published dataset (its manifest, statistics and
    rejected records), the job's graph and timings. The time it takes to read the dataset back
    is added to the timings' steps (`report`; rendering and writing the page come after). The
    dataset is complete without it: a report that cannot be written (a file that cannot be read,
    a statistics.json that breaks its contract) is a warning, not a failed run."""
    from pipelines.report.page import (
        render,  # only here: the report's code is only for this
    )

    try:
        started = time.monotonic()
        manifest = Manifest.from_json(_read(f"{output}/{MANIFEST}"))
        entry = manifest.statistics
        statistics = None
        if entry is not None:
            path = f"{output}/{entry.path}"
            statistics = Statistics.loads(_read(path), path)
        rows = None
        if manifest.facts is not None:
            path = f"{output}/{manifest.facts.path}"
            rows = Facts.loads(_read(path), path).rows
        examples = rejected_examples(output, manifest)
        seconds = round(time.monotonic() - started, 3)
        read_back = {"name": "report: read the dataset back", "seconds": seconds}
        timings = dict(timings, steps=[*timings.get("steps", []), read_back])
        page = render(manifest, statistics, graph, timings, examples, rows).encode("utf-8")
        write_atomically(f"{output}/{REPORT}", page, "text/html")
    except Exception as e:  # noqa: BLE001 - see above
        logger.warning("the run report was not written: %s: %s", type(e).__name__, e)


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def rejected_examples(
    output: str, manifest: Manifest, per_reason: int = 5
) -> dict[str, list[dict]]:
    """Up to `per_reason` rejected records of each reason (location and record), in file order."""
    examples: dict[str, list[dict]] = {}
    wanted = len(manifest.rejected.reasons)
    for entry in manifest.rejected.files or ():
        with FileSystems.open(
            f"{output}/{entry.path}", compression_type=CompressionTypes.UNCOMPRESSED
        ) as f:
            for line in f:
                record = Rejected.from_json(json.loads(line))
                found = examples.setdefault(record.reason, [])
                if len(found) < per_reason:
                    found.append({"location": record.location, "record": record.record})
                if len(examples) == wanted and all(len(v) == per_reason for v in examples.values()):
                    return examples
    return examples
