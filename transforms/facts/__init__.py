"""The analyze step: the facts of a dataset, counted in the Beam job over every record of each
split, what a model is built from (`facts.json`, typed in `transforms.contract.facts`).

Counted a group of chunks at a time beside the statistics (`transforms.prepare.Encoder`), as
parts that merge by addition, so that any runner, worker count and grouping gives the same
bytes:

- every string feature (the label too): the exact count of the records holding each distinct
  value (`Vocabulary`, keyed by the value's 128-bit XXH3 digest);
- every number: a sketch of its finite values (`Sketch`: counts on buckets of relative width
  `SKETCH_ERROR`, whose quantiles are within that relative error of the true ones) and the
  `KMV` smallest hashes of its distinct values (a distinct-count estimate, about 3% off);
- every record: a 64-bit hash of its content without the label (and the key, which names the
  record rather than describes it) and one of its label (`Rows`), from which repeated rows and
  conflicting labels (the same content, another label) are counted.

A worker's parts are cut into `BUCKETS` parts by hash (`FactParts.buckets`) whenever they hold
about `FACTS_SPILL_BYTES` (and at the end of a bundle) and written to a spill file in the
staging folder (`spill`), a bucket after the other; only the pieces' names travel on. A bucket's
pieces, from every spill file, are grouped (a `GroupByKey`), read one at a time and merged
exactly (`rank_bucket`: a bucket's distinct values meet on one worker, a sixteenth of them),
cut to the vocabulary cap (`FactParts.ranked`), and the buckets' parts merged into one
(`MergeRanked`), holding at most a few times the cap of a feature's values. `facts_of` builds
facts.json from that and the statistics, whose exact moments, bounds and (while a number has
few) value counts it takes; `transforms.sink.finalize.WriteFactsFn` writes it.

The package, a module a stage: `parts` (the mergeable counts and their cut by bucket), `count`
(a group of records counted into parts), `spill` (the spill files), `merge` (the Beam steps,
`AnalyzeFacts`), `written` (facts.json from the merged facts and the statistics).
"""
