"""A training run: the distribution strategy, fit with its callbacks, evaluation, the served
export, the model folder (claimed, locked, published), the report and the input profile. The
commands (trainer.task) drive it; it stands on trainer.keras, trainer.recipe and
trainer.dataset.
"""
