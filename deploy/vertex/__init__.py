"""Vertex AI training: `shardflow launch-training` (launch.py), the trainer image (Dockerfile)."""
