"""Vertex AI training: `shardflow launch-training` (launch.py) and the trainer image (Dockerfile)."""
