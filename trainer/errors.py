"""The one-line form of a TensorFlow error that `shardflow train` prints (its usage error is
`transforms.ui.errors.UsageError`, every command's).

No TensorFlow and no Beam here: deploy/ imports it as well as trainer/.
"""

from __future__ import annotations

import re
from typing import Any

from transforms.ui.safe import shown


def first_line(e: BaseException) -> str:
    """The line of a (TensorFlow) error that says what went wrong, without the graph context;
    its secrets masked and its control characters escaped (`transforms.ui.safe.shown`: TF
    repeats the paths it was given, passwords included, and values from data)."""
    text = (getattr(e, "message", None) or str(e)).strip()
    noise = ("Graph execution error", "Detected at node", "<stack traces unavailable>")
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line[0].isspace() and not line.startswith(noise)
    ]
    line = lines[-1] if lines else text.splitlines()[0] if text else ""
    # tf.data prefixes the op's message with the transformation and iterator it ran in; eager
    # ops wrap it in "{{function_node ...}} MESSAGE [Op:NAME] name: ".
    if "assertion failed: " in line:
        line = line[line.index("assertion failed: ") :]
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)
    line = re.sub(r"\s*\[Op:\w+\]( name: ?\S*)?$", "", line)
    return shown(f"{type(e).__name__}: {line}") if line else type(e).__name__


# The kinds of values a shard holds, as TensorFlow's parser and tfx-bsl's decoder name them.
_HELD = {"int64": "int", "float": "float", "string": "string or bytes", "bytes": "string or bytes"}


def type_mismatch(manifest: Any, feature: str, held: str) -> str:
    """One line for a shard whose `feature` holds `held` values (a kind as TensorFlow or
    tfx-bsl names it: int64, float, string, bytes) where the manifest declares another type:
    the manifest was edited, or is another's."""
    want = manifest.features.get(feature)
    declared = want.type if want is not None else "another type"
    return (
        f"{manifest.root}: feature {feature!r}: the shards hold {_HELD.get(held, held)} values "
        f"where manifest.json declares {declared}: the manifest was edited after the ETL wrote "
        "it, or is not these shards' manifest; rerun the ETL"
    )
