"""Deployment helpers: Dataflow submission, Vertex AI training jobs, schedules, Docker images."""
