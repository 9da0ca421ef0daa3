"""The runner's plumbing, below the commands: Beam options and the tuning derived from them
(options.py), local worker processes (workers.py, forkserver.py), the runner's log kept off the
terminal (joblog.py), TensorFlow's native start-up lines kept off stderr (quiet.py), the progress
lines of a running job (progress.py) and how a command's process ends (process.py).

Nothing here is imported on import of the package: `shardflow`'s command table imports only
forkserver.py and quiet.py of it before a command's own module.
"""
