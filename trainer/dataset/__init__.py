"""The trainer's floor: a dataset as the contract writes it, read without TensorFlow.

Its manifest at one or several locations read as one (`manifest`, `union`), the small files
and shard bytes of local folders and gs:// prefixes (`storage`, `paths`), the TFRecord framing
with the check that a shard is the one its manifest lists (`framing`), and the facts of the
data: class, vocabulary and moments rules (`facts`). The Keras path (trainer.keras), the
PyTorch and JAX readers (trainer.readers) and the commands stand on it; it imports nothing of
the trainer above it (tests/test_architecture.py).
"""
