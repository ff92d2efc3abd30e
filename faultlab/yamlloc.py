"""Where a field of a YAML document lives: the line of a pydantic error location in
the document's node tree, and the location written as a field path, so a bad
scenario or campaign is one line naming ``FILE:LINE: FIELD``."""

from __future__ import annotations

import yaml


def line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (pydantic's error location)."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def fmt_loc(loc: tuple) -> str:
    """A pydantic error location as a field path: ``types.io-slow.params.path``,
    ``faults[0].node``."""
    out = ""
    for k in loc:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out
