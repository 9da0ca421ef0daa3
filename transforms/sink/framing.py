"""TFRecord framing and the writer of one record file, local or gs://, optionally compressed.

A TFRecord is: length (u64), masked CRC-32C of the length, data, masked CRC-32C of the data;
`frame_records` frames a block of records at once with numpy and Arrow. `RecordFileWriter`
compresses as `transforms.contract.layout.COMPRESSIONS` says (zlib with the compression's
window bits; the gzip header has no timestamp, so the same records give the same bytes) and
keeps the file's size and SHA-256 for the manifest. It writes a whole file, or one segment of
a file that `transforms.sink.segments` joins.
"""

from __future__ import annotations

import contextlib
import hashlib
import zlib
from typing import Any, Iterator, Sequence

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import COMPRESSIONS, CRC_MASK_DELTA, DEFAULT_COMPRESSION_LEVEL
from transforms.files import abandon
from transforms.sink.segments import RAW_WBITS, wrapper
from transforms.split import binary, binary_offsets

_BUFFER = 1 << 20
BLOCK_RECORDS = 4096  # records framed at a time


def _mask(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C, of many CRCs at once."""
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(CRC_MASK_DELTA)


def frame_records(payloads: Sequence[bytes] | pa.Array) -> bytes:
    """Each payload as a TFRecord, concatenated.

    A TFRecord is: length (u64), masked CRC-32C of the length, data, masked CRC-32C of the data.
    Headers and trailers are built for all records at once with numpy (the length's CRC once per
    distinct length); Arrow joins them with the payloads in one pass.
    """
    payloads = binary(payloads)
    n = len(payloads)
    if not n:
        return b""
    offsets = binary_offsets(payloads)
    crc = google_crc32c.value
    lengths = np.diff(offsets).astype("<u8")
    distinct, which = np.unique(lengths, return_inverse=True)
    length_crcs = np.array([crc(x.tobytes()) for x in distinct], np.uint32)
    # google_crc32c takes bytes only: one copy of this block's values, sliced per record
    data, first = payloads.buffers()[2], int(offsets[0])
    blob = data.slice(first, int(offsets[-1]) - first).to_pybytes() if data is not None else b""
    bounds = (offsets - first).tolist()
    data_crcs = np.fromiter((crc(blob[a:b]) for a, b in zip(bounds, bounds[1:])), np.uint32, n)
    heads = np.empty((n, 12), np.uint8)
    heads[:, :8] = lengths.view(np.uint8).reshape(n, 8)
    heads[:, 8:] = _mask(length_crcs)[which].astype("<u4").view(np.uint8).reshape(n, 4)
    tails = _mask(data_crcs).astype("<u4").view(np.uint8).reshape(n, 4)
    framed = pc.binary_join_element_wise(_fixed_width(heads), payloads, _fixed_width(tails), b"")
    size = int(offsets[-1] - offsets[0]) + 16 * n
    return framed.buffers()[2].slice(0, size).to_pybytes()


def _fixed_width(rows: np.ndarray) -> pa.Array:
    """The rows of a 2-d uint8 array as a binary array."""
    n, width = rows.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))]
    )


class RecordFileWriter:
    """Writes framed, optionally compressed TFRecords to a local or gs:// path: a whole record
    file, or, with `segment`, one segment of one (`transforms.sink.segments`).

    Tracks the written file's size and SHA-256. The gzip header zlib writes has no timestamp, so
    the same records give the same bytes. A segment of a gzip or zlib file is raw deflate data
    that ends on a byte boundary, or with the final block when it is the file's `last`; its facts
    add the length and checksum of its uncompressed data (`raw_bytes`, `checksum`), from which
    the join writes the file's trailer.
    """

    def __init__(
        self,
        path: str,
        compression: str,
        level: int = DEFAULT_COMPRESSION_LEVEL,
        segment: bool = False,
        last: bool = True,
    ):
        self.path = path
        self._file = FileSystems.create(
            path,
            mime_type="application/octet-stream",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )
        wbits = COMPRESSIONS[compression].wbits
        self._compressor = None
        if wbits is not None:
            wbits = RAW_WBITS if segment else wbits
            self._compressor = zlib.compressobj(level, zlib.DEFLATED, wbits)
        self._end = zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH
        self._wrapper = wrapper(compression) if segment else None
        self._checksum = self._wrapper.initial if self._wrapper is not None else 0
        self._raw_bytes = 0
        self._sha = hashlib.sha256()
        self._pending: list[bytes] = []
        self._pending_size = 0
        self.records = 0
        self.bytes = 0

    def write(self, payloads: Sequence[bytes] | pa.Array) -> None:
        """Appends records, framed, in blocks of about a megabyte."""
        payloads = binary(payloads)
        with self._abandoned_on_error():
            for start in range(0, len(payloads), BLOCK_RECORDS):
                block = payloads.slice(start, BLOCK_RECORDS)
                self._pending.append(frame_records(block))
                self._pending_size += len(self._pending[-1])
                self.records += len(block)
                if self._pending_size >= _BUFFER:
                    self._flush_pending()

    def _flush_pending(self) -> None:
        block = b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        if self._wrapper is not None:
            self._checksum = self._wrapper.checksum(block, self._checksum)
            self._raw_bytes += len(block)
        if self._compressor is not None:
            block = self._compressor.compress(block)
        self._emit(block)

    def _emit(self, block: bytes) -> None:
        if block:
            self._sha.update(block)
            self.bytes += len(block)
            self._file.write(block)

    @contextlib.contextmanager
    def _abandoned_on_error(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            abandon(self._file, self.path)
            raise

    def close(self) -> dict[str, Any]:
        with self._abandoned_on_error():
            self._flush_pending()
            if self._compressor is not None:
                self._emit(self._compressor.flush(self._end))
            self._file.close()
        facts = {"records": self.records, "bytes": self.bytes, "sha256": self._sha.hexdigest()}
        if self._wrapper is not None:
            facts.update(raw_bytes=self._raw_bytes, checksum=self._checksum)
        return facts
