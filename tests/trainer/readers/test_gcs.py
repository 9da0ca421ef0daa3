"""A dataset on Cloud Storage (the emulator of tests/services/gcs.py) reads as a local one."""

from __future__ import annotations

import numpy as np

from trainer.readers.stream import Reader


def test_a_gs_dataset_reads_like_the_local_one(dataset, gcs_emulator):
    bucket = gcs_emulator.client().bucket(gcs_emulator.buckets[0])
    for path in sorted(dataset.root.rglob("*")):
        if path.is_file():
            relative = path.relative_to(dataset.root).as_posix()
            bucket.blob(f"readers/penguins/{relative}").upload_from_filename(str(path))
    remote = f"gs://{gcs_emulator.buckets[0]}/readers/penguins"
    batches = []
    for root in (remote, str(dataset.root)):
        reader = Reader(root, "train", 50, shuffle=False, deterministic=True)
        batches.append(list(reader.batches(reader.layout(), 0)))
    assert len(batches[0]) == len(batches[1]) == 5
    for mine, local in zip(*batches):
        for key, value in local.items():
            np.testing.assert_array_equal(mine[key], value, err_msg=key)
