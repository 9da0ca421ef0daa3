"""What the built-in training is sized to, decided from the labelled train records: the batch,
the epochs' cap of early stopping, dropout and weight decay (`Sizing.of`). The schedule
(trainer.run.schedule) and the built-in model (trainer.keras.model) read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizing:
    """What the built-in training is sized to, from the train records it learns from.

    - `batch_size`: about a hundredth of the records, a power of two in [32, 512];
    - `max_epochs`: the cap of early stopping, about 3 million examples seen, in [20, 200];
    - `dropout`: 0.1 under 30,000 records (a small dataset is the one to overfit), else 0;
    - `weight_decay`: AdamW's, 1e-4 (as a fraction of the learning rate, per step).
    """

    batch_size: int
    max_epochs: int
    dropout: float
    weight_decay: float = 1e-4

    @classmethod
    def of(cls, records: int) -> Sizing:
        records = max(1, records)
        batch = int(min(512, max(32, 2 ** round(math.log2(max(1.0, records / 100))))))
        epochs = int(min(200, max(20, round(3_000_000 / records))))
        return cls(batch_size=batch, max_epochs=epochs, dropout=0.1 if records < 30_000 else 0.0)
