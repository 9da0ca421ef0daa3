"""What each feature becomes for the model, decided once per run, without Keras.

`facts` gathers what the rules look at (the dataset's facts and statistics, a sample of the
train split), `label` decides the task and the label's scale, `rules` decides every feature's
model input (`decide`: the recipe). The Keras wing (trainer.keras) builds what the recipe says.
"""
