"""A call-graph decision node, built the same way by the recorder and the replay session.

Both take ``decision(step, node, /, **fields)`` where ``node`` is the node's
name (a non-empty str) with its other fields as keywords, or one mapping holding
a ``"node"`` key (any canonical value, as run documents allow) and the fields
(then no keywords). Both forms make the same
stored entry ``{"step": step, "node": name, **fields}``, so a recording and
its replay compare equal exactly when the runtime took the same decision; a
malformed node is refused at the call, never later as a CALL_GRAPH_MISMATCH.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from cpstore.errors import CanonicalEncodingError, InvalidInputError
from cpstore.native.canonical import _ext_hook, encode_value
from cpstore.native.records import step_value

__all__ = ["decision_node"]


def decision_node(step: object, node: object, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The stored entry of a decision (module docstring), or InvalidInputError."""
    value = step_value(step)  # judged by its value (review81)
    if value is None:
        raise InvalidInputError("step must be an int in [0, 2**63)", got=step)
    step = value
    if isinstance(node, Mapping):
        if fields:
            raise InvalidInputError(
                "give the decision as one mapping or as a name with keyword fields, not both",
                got=sorted(fields),
            )
        entry = dict(node)
        if "node" not in entry:
            raise InvalidInputError("decision node must have a 'node' key", got=sorted(entry))
    elif isinstance(node, str):
        if "node" in fields or "step" in fields:
            raise InvalidInputError(
                "'node' and 'step' are arguments, not fields", got=sorted(fields)
            )
        entry = {"node": node, **fields}
    else:
        raise InvalidInputError(
            "decision node must be its name (str) or a mapping with a 'node' key",
            expected="decision(step, 'select_tool', tool='search') or "
            "decision(step, {'node': 'select_tool', 'tool': 'search'})",
            got=type(node).__name__,
        )
    for key in entry:
        if not isinstance(key, str):
            raise InvalidInputError("decision node keys must be str", got=key)
    if isinstance(node, str) and not node:
        raise InvalidInputError("decision node's name must be a non-empty str", got=node)
    # The mapping's own "step" agrees only as a step of the same value (review83: it was
    # compared with ==, so True, 1.0 or a subclass equal to everything agreed with step 1,
    # where a run document refuses such a node's step).
    if "step" in entry and step_value(entry["step"]) != step:
        raise InvalidInputError(
            "decision node's 'step' disagrees with step", expected=step, got=entry["step"]
        )
    entry["step"] = step
    try:
        encoded = encode_value(entry)
    except CanonicalEncodingError as exc:
        raise CanonicalEncodingError(
            exc.what,
            where="decision node" + (exc.where or "$")[1:],
            expected=exc.expected,
            got=exc.got,
        ) from None
    # The entry as decided, read back from its encoding: a fresh object, never the
    # caller's. review70: the caller's lists and maps were kept, so a runtime that reused
    # an argument list after the call had the call graph show the later value (a replay
    # that decided otherwise was an ACCEPT once the list held what the recording does).
    # The bytes were just made canonical: decoded as the cursor decodes a verified block.
    decided: dict[str, Any] = msgpack.unpackb(
        encoded, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
    )
    return decided
