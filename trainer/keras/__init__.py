"""The Keras path: tf.data input, feature parsing, preprocessing layers, the built-in and user
models, and the tf.Transform graph, built from the recipe (trainer.recipe) on the dataset floor
(trainer.dataset). `inputs.Inputs` is what a run's model reads, decided once.
"""
