"""The readers import neither TensorFlow nor Beam: a child process that cannot import them
reads a dataset through the core, PyTorch (with a loader worker) and JAX."""

from __future__ import annotations

from tests.trainer.readers.conftest import run_code

BLOCKED = """
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("tensorflow", "apache_beam"):
            raise ImportError(f"{name} is blocked here")

sys.meta_path.insert(0, Blocked())
import trainer.readers
from trainer.readers import jax_batches, torch_loader

root, options = sys.argv[1], {"shuffle": False, "deterministic": True}
loader = torch_loader(root, "eval", 16, num_workers=1, **options)
torch_ids = [b["id"].tolist() for b in loader]
jax_ids = [b["id"].tolist() for b in jax_batches(root, "eval", 16, **options)]
assert torch_ids == jax_ids, (torch_ids, jax_ids)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "apache_beam"))
print(sum(torch_ids, []), heavy)
"""


def test_the_readers_read_a_dataset_with_tensorflow_and_beam_blocked(dataset):
    proc = run_code(BLOCKED, str(dataset.root))
    ids, heavy = proc.stdout.strip().splitlines()[-1].rsplit(" [", 1)
    assert ids == str([r["id"] for r in dataset.rows["eval"]])
    assert heavy == "]"


def test_importing_the_readers_imports_neither_torch_nor_jax():
    code = """
    import sys
    import trainer.readers
    print(sorted(m for m in ("torch", "jax", "tensorflow", "apache_beam") if m in sys.modules))
    """
    assert run_code(code).stdout.strip().splitlines()[-1] == "[]"
