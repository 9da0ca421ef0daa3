"""The last step of a run: the staged dataset completed (rejected records, statistics,
manifest), checked against what its config asked for (`transforms.quality`) and its data
validated (`transforms.validation`: schema, anomalies), then published
(`transforms.sink.publish`). Each of these steps is timed for the run report
(`transforms.progress.timed`)."""

from __future__ import annotations

import hashlib
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions

import transforms.coders  # noqa: F401 - registers the coders of the statistics and facts
from transforms.contract.config import DatasetSpec
from transforms.contract.layout import FACTS, SCHEMA, STATISTICS, STATISTICS_PROTO, shard_name
from transforms.contract.manifest import FileEntry, Manifest, ValidationEntry
from transforms.contract.statistics import Statistics
from transforms.facts.parts import RankedFacts
from transforms.facts.written import facts_of
from transforms.files import create_file
from transforms.progress import timed
from transforms.quality import QualityError, check_dataset, check_rejections
from transforms.sink.manifest import build_manifest
from transforms.sink.output import Expected
from transforms.sink.publish import publish
from transforms.sink.rejected import RejectedFiles
from transforms.sink.spill import spill_folder
from transforms.sink.storage import delete_folder, read_if_exists
from transforms.stats import DatasetStats
from transforms.validation.check import Baseline, describe, read_dataset, validate


def write_bytes(staging: str, name: str, data: bytes, content_type: str) -> dict[str, Any]:
    """Writes one file of the dataset; returns its manifest entry (path, bytes, sha256)."""
    with create_file(f"{staging}/{name}", content_type) as f:
        f.write(data)
    return {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def validated(
    dataset: DatasetSpec,
    staging: str,
    manifest: Manifest,
    statistics: Statistics,
    baseline: Baseline | None,
) -> Manifest:
    """The manifest with its data validation (schema.pbtxt and statistics.pb written); raises
    QualityError naming the first blocking anomaly."""
    result = validate(dataset.validation, manifest, statistics, baseline)
    schema = write_bytes(staging, SCHEMA, result.schema_text.encode("utf-8"), "text/plain")
    proto = write_bytes(
        staging, STATISTICS_PROTO, result.statistics_proto, "application/octet-stream"
    )
    blocking = result.blocking
    if blocking:
        more = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
        raise QualityError(
            f"validation: {describe(blocking[0])}{more}; blocking anomalies "
            f"({', '.join(dataset.validation.block)}) fail the run; no dataset published"
        )
    return manifest.with_validation(
        ValidationEntry(
            schema=FileEntry(**schema),
            statistics=FileEntry(**proto),
            schema_from=result.schema_from,
            baseline=None if baseline is None else baseline.uri,
            anomalies=tuple(a.to_dict() for a in result.anomalies),
        )
    )


def write_facts(
    dataset: DatasetSpec, staging: str, facts: RankedFacts, statistics: DatasetStats
) -> dict[str, Any]:
    """Writes facts.json (`transforms.facts.written.facts_of`); returns its manifest entry."""
    with timed("facts"):
        made = facts_of(dataset, facts, statistics, dataset.vocabulary_cap)
        return write_bytes(staging, FACTS, made.dumps().encode("utf-8"), "application/json")


class WriteFactsFn(beam.DoFn):
    """The analyzed facts (`transforms.facts.AnalyzeFacts`) → facts.json in the staging folder,
    with the merged statistics (a side input); yields its manifest entry. A step of its own,
    so that the facts (megabytes, with their vocabularies) reach no other step."""

    def __init__(self, dataset: DatasetSpec, staging: str):
        self._dataset = dataset
        self._staging = staging

    def process(self, facts: RankedFacts, statistics: DatasetStats):
        yield write_facts(self._dataset, self._staging, facts, statistics)


class _PublishFn(beam.DoFn):
    def __init__(
        self, dataset: DatasetSpec, staging: str, expected: Expected, baseline, before_publish
    ):
        self._dataset = dataset
        self._staging = staging
        self._expected = expected
        self._baseline = baseline
        self._before_publish = before_publish

    def process(
        self,
        _,
        shards,
        shard_count,
        rejected: RejectedFiles,
        counts,
        transform=None,
        statistics=None,
        facts=None,
    ):
        out = self._dataset.output
        shards = list(shards)
        expected = {
            shard_name(split, index, n, out.suffix)
            for split, n in zip(self._dataset.split_names, shard_count)
            for index in range(n)
        }
        written = sorted(s.path for s in shards)
        if sorted(expected) != written:  # every shard is written once, if empty, or the run fails
            raise RuntimeError(
                f"shards written {written} differ from those planned {sorted(expected)}"
            )
        with timed("delete spill files"):
            delete_folder(spill_folder(self._staging))
        counts = dict(counts)
        with timed("manifest and checks"):
            manifest = build_manifest(self._dataset, shards, rejected, counts, transform)
        if statistics is not None:
            with timed("statistics merge"):  # its last part: statistics.json
                result = statistics.result(self._dataset.split_names)
                data = result.dumps().encode("utf-8")
                entry = write_bytes(self._staging, STATISTICS, data, "application/json")
            manifest = manifest.with_statistics(FileEntry(**entry))
            if facts is not None:  # none written: no record was counted
                facts_file = (
                    facts[0]
                    if facts
                    else write_facts(self._dataset, self._staging, RankedFacts(), statistics)
                )
                manifest = manifest.with_facts(FileEntry(**facts_file))
        with timed("manifest and checks"):
            check_dataset(self._dataset, manifest, counts, rejected.counts)
            check_rejections(self._dataset, manifest)
        if statistics is not None:
            with timed("validation"):
                baseline = None
                if self._baseline is not None:  # read here: its statistics may be megabytes
                    _, base_statistics, base_schema = read_dataset(read_if_exists, self._baseline)
                    baseline = Baseline(self._baseline, base_statistics, base_schema)
                # the splits in the config's order, as statistics.pb lists them
                manifest = validated(self._dataset, self._staging, manifest, result, baseline)
        with timed("publish"):
            publish(self._staging, out.path, manifest, self._expected, self._before_publish)
        yield manifest


class PublishDataset(beam.PTransform):
    """Completes the staged dataset (statistics, manifest, validation) and publishes it.

    Applied to a dict of PCollections, as the graph built them:
      shards        the facts of every shard written (`transforms.sink.write.WriteShards`)
      shard_count   one element: the shards per split
      rejected      one element: the rejected files and counts (`transforms.sink.rejected`)
      counts        (counter, total) pairs: records read per source, fields present, ...
      transform     optional, one element: the manifest's `transform` section, when the dataset
                    has a tf.Transform (written under the staging folder and published with it)
      statistics    optional, one element: the merged statistics (`transforms.stats`)
      facts         optional, at most one element: the manifest entry of facts.json, written
                    by `WriteFactsFn` (none when no record was counted: then written here,
                    from no facts)
    Returns a one-element PCollection holding the published manifest. `expected` is what
    publication may replace at OUTPUT (`transforms.sink.publish.expect`, taken when the run
    started; by default nothing); `baseline` the dataset (URI) the statistics are compared with;
    `before_publish`, for tests, is called just before OUTPUT is touched.
    """

    def __init__(
        self,
        dataset: DatasetSpec,
        staging: str,
        expected: Expected = Expected(),
        baseline=None,
        before_publish=None,
    ):
        super().__init__()
        self._before_publish = before_publish
        self._dataset = dataset
        self._staging = staging
        self._expected = expected
        self._baseline = baseline

    def expand(self, inputs):
        side_inputs = [
            beam.pvalue.AsList(inputs["shards"]),
            beam.pvalue.AsSingleton(inputs["shard_count"]),
            beam.pvalue.AsSingleton(inputs["rejected"]),
            beam.pvalue.AsDict(inputs["counts"]),
        ]
        if inputs.get("transform") is not None:
            side_inputs.append(beam.pvalue.AsSingleton(inputs["transform"]))
        extra = {}
        if inputs.get("statistics") is not None:
            extra["statistics"] = beam.pvalue.AsSingleton(inputs["statistics"])
        if inputs.get("facts") is not None:
            extra["facts"] = beam.pvalue.AsList(inputs["facts"])
        pipeline = inputs["shards"].pipeline
        expected = self._expected
        if pipeline.options.view_as(GoogleCloudOptions).template_location:
            # a template runs later, maybe many times: what OUTPUT holds now binds none of them
            expected = expected.unpinned()
        publish_fn = _PublishFn(
            self._dataset, self._staging, expected, self._baseline, self._before_publish
        )
        return (
            pipeline
            | "Start" >> beam.Create([None])
            | "WriteManifestAndPublish" >> beam.ParDo(publish_fn, *side_inputs, **extra)
        )
