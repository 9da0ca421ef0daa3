"""The pipeline graph of a job, for its run report: its top-level steps and the data between them.

Read from the pipeline's portable representation (`Pipeline.to_runner_api()`, what any runner
receives), so it shows the job's steps under the labels a runner's UI shows (`Read[penguins]`,
`PrepareRecords`, `WriteShards`, `Publish`, ...). An edge is any data flowing from a step
into another, side inputs included, found on the steps' innermost transforms.
"""

from __future__ import annotations

import apache_beam as beam


def pipeline_graph(p: beam.Pipeline) -> dict:
    """{"nodes": [{"id", "label"}], "edges": [[from id, to id]]} of the top-level steps."""
    proto = p.to_runner_api()
    transforms = proto.components.transforms
    tops = list(proto.root_transform_ids)
    while len(tops) == 1 and transforms[tops[0]].subtransforms:  # the pipeline's own wrapper
        tops = list(transforms[tops[0]].subtransforms)
    ids = {tid: f"n{i}" for i, tid in enumerate(tops)}
    step = {}  # every transform → the id of its top-level step
    todo = [(tid, ids[tid]) for tid in tops]
    while todo:
        tid, node = todo.pop()
        step[tid] = node
        todo += [(sub, node) for sub in transforms[tid].subtransforms]
    producer = {pcoll: step[tid] for tid in step for pcoll in transforms[tid].outputs.values()}
    edges = {
        (producer[pcoll], step[tid])
        for tid in step
        for pcoll in transforms[tid].inputs.values()
        if pcoll in producer and producer[pcoll] != step[tid]
    }
    return {
        "nodes": [{"id": ids[tid], "label": transforms[tid].unique_name} for tid in tops],
        "edges": sorted([list(e) for e in edges], key=lambda e: (int(e[0][1:]), int(e[1][1:]))),
    }
