"""Several datasets as one input: `shardflow train --data A B ...` or a date range.

A scheduled ETL writes one dataset per date (`out/daily/2026-11-01`, ...). `--data` takes
several dataset URIs, and a URI may hold a date range in braces, `out/daily/{2026-11-01..
2026-11-26}`, which stands for one URI per day (the dates written as the range's ends are:
`{2026/11/01..2026/11/26}` gives `2026/11/01` ...). Their manifests must agree on the features,
the label and the compression (an error names the first difference); their splits are read as
one (the files of all, the records summed). A tf.Transform output comes from the first dataset:
the others' raw shards go through it too. Nothing is read twice: a dataset given twice (`ds` and
`ds/`, a link to it, a date range that repeats one) or one shard file listed twice (in one
split or two, by one dataset or two) is refused before training, naming both
(`check_once`); the PyTorch and JAX readers read datasets through it too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from trainer.dataset import storage
from trainer.dataset.manifest import Manifest, ManifestError, load_manifest
from trainer.dataset.paths import expand, normalize_root
from transforms.contract.manifest import RejectedEntry, SplitEntry

logger = logging.getLogger(__name__)


def load_datasets(uris: str | Sequence[str]) -> Manifest:
    """The manifest of the datasets at `uris` (one URI or several; date ranges expanded) read
    as one; ManifestError for none, for one given twice, or a shard file listed twice."""
    roots = expand([uris] if isinstance(uris, str) else list(uris))
    if not roots:
        raise ManifestError("no dataset given")
    check_once("--data", [normalize_root(root) for root in roots], {})
    missing, manifests = [], []
    for root in roots:
        try:
            manifests.append(load_manifest(root))
        except ManifestError as e:
            if len(roots) == 1:
                raise
            missing.append((root, e))
    if missing:
        raise ManifestError(
            f"--data: {len(missing)} of {len(roots)} datasets cannot be read, e.g. {missing[0][1]}"
        )
    combined = combine(manifests)
    check_once("--data", (), {n: [f.path for f in s.files] for n, s in combined.splits.items()})
    return combined


def check_once(flag: str, roots: Sequence[str], splits: Mapping[str, Sequence[str]]) -> None:
    """ManifestError when two of the dataset locations `roots` are one dataset, or when two of
    the shard paths of `splits` (split name -> absolute paths) are one file (compared as
    storage.same_file_key: links and `..` do not hide it): its records would be read twice,
    or a model scored on records it trained on. `flag` names the argument in the error."""
    seen: dict = {}
    for root in roots:
        key = storage.same_file_key(root)
        if key in seen:
            same = "" if seen[key] == root else f" is {seen[key]},"
            raise ManifestError(
                f"{flag}: {root}{same} given twice: its records would be read (and scored) "
                "twice; give each dataset once"
            )
        seen[key] = root
    places: dict = {}
    for name, paths in splits.items():
        for path in paths:
            key = storage.same_file_key(path)
            if key in places:
                first, split = places[key]
                where = f"split {name!r}" if split == name else f"splits {split!r} and {name!r}"
                raise ManifestError(
                    f"{flag}: {path} is {first}: one shard listed twice ({where}): its "
                    "records would be read twice, or a model scored on records it trained on; "
                    "give each dataset once, and rerun the ETL of one whose shards are links"
                )
            places[key] = (path, name)


def combine(manifests: Sequence[Manifest]) -> Manifest:
    """One manifest of several datasets' splits; ManifestError naming the first difference."""
    first = manifests[0]
    if len(manifests) == 1:
        return first
    for other in manifests[1:]:
        difference = _difference(first, other)
        if difference:
            raise ManifestError(
                f"--data: {other.root} does not match {first.root}: {difference}; datasets "
                "read as one must declare the same features, label and compression"
            )
    splits = {}
    for name in sorted({s for m in manifests for s in m.splits}):
        parts = [m.splits[name] for m in manifests if name in m.splits]
        splits[name] = SplitEntry(
            records=sum(p.records for p in parts),
            files=tuple(f for p in parts for f in p.files),
        )
    if first.transform is not None:
        logger.info("--data: the tf.Transform output of %s applies to all", first.root)
    logger.info(
        "--data: %d datasets read as one: %s", len(manifests),
        ", ".join(f"{n} {s.records}" for n, s in splits.items()),
    )  # fmt: skip
    reasons: Counter = Counter()
    for m in manifests:
        reasons.update(m.rejected.reasons)
    rejected = RejectedEntry(records=sum(m.rejected.records for m in manifests), reasons=reasons)
    written = dataclasses.replace(
        first.written, rejected=rejected, duplicates=sum(m.duplicates for m in manifests)
    )
    return dataclasses.replace(first, written=written, splits=splits, parts=tuple(manifests))


def _difference(a: Manifest, b: Manifest) -> str | None:
    if a.label != b.label:
        return f"label {b.label!r}, not {a.label!r}"
    if a.compression != b.compression:
        return f"compression {b.compression!r}, not {a.compression!r}"
    for name in a.features:
        if name not in b.features:
            return f"no feature {name!r}"
        if a.features[name] != b.features[name]:
            fa, fb = a.features[name], b.features[name]
            field = next(
                f.name for f in dataclasses.fields(fa) if getattr(fa, f.name) != getattr(fb, f.name)
            )
            return (
                f"feature {name!r} has {field} {getattr(fb, field)!r}, not {getattr(fa, field)!r}"
            )
    extra = sorted(set(b.features) - set(a.features))
    return f"an extra feature {extra[0]!r}" if extra else None
