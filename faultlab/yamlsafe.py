"""YAML input files (scenarios, campaigns, inventories) read strictly.

``yaml.safe_load`` keeps the *last* of two equal keys in a mapping without a word
(``seed: 0`` then ``seed: 5`` reads as 5), so a typo'd duplicate silently changes a
run. :func:`load` is ``safe_load`` (same tags, no Python objects) that refuses a
duplicated key, naming it and both lines. Keys brought in by a merge (``<<: *base``)
may be overridden, as YAML says; only keys written twice in one mapping are refused.
Text nested too deeply for the parser (its recursion) is a ``TooDeep`` YAML error,
reported like any other bad YAML, and so is a document whose aliases make it expand to
more than ``MAX_VALUES`` values (a few hundred bytes of nested aliases expand to
billions: every reader walks the expanded document).
"""

from __future__ import annotations

import yaml

_MERGE = "tag:yaml.org,2002:merge"
#: the most values (scalars, lists, mappings) a document may expand to through its
#: aliases: far above any scenario, campaign or inventory
MAX_VALUES = 1_000_000


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names ``key`` twice: at ``line`` (1-based) and first at ``first_line``."""

    def __init__(self, key, line: int, first_line: int, mark):
        self.key, self.line, self.first_line = key, line, first_line
        super().__init__(None, None, f"duplicated key {key!r} (also at line {first_line})", mark)


class TooDeep(yaml.YAMLError):
    """The text nests deeper than the parser can follow (RecursionError) or is too
    large to hold (MemoryError)."""

    def __init__(self, err: BaseException):
        super().__init__(f"nested too deeply or too large to read ({type(err).__name__})")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises DuplicateKey for a key written twice in a mapping."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if key in seen:
                    raise DuplicateKey(key, key_node.start_mark.line + 1, seen[key], key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


class TooLarge(yaml.YAMLError):
    """The document expands through its aliases to more than ``MAX_VALUES`` values, or
    an alias refers to a value that holds it."""


def load(text: str):
    """``yaml.safe_load(text)`` refusing duplicated keys. Raises DuplicateKey, TooDeep
    or TooLarge (all ``yaml.YAMLError``) or any other ``yaml.YAMLError``."""
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
        _check_expanded_size(data)
    except (RecursionError, MemoryError) as e:
        raise TooDeep(e) from None
    return data


def _check_expanded_size(data) -> None:
    """Raise TooLarge when ``data``, its shared values (aliases) counted each time they
    appear, holds more than ``MAX_VALUES`` values or a value that holds itself. Linear
    in the number of distinct values: each one's expanded size is computed once."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(v) -> int:
        if not isinstance(v, (list, dict)):
            return 1
        if id(v) in sizes:
            return sizes[id(v)]
        if id(v) in open_:
            raise TooLarge("an alias refers to a value that holds it")
        open_.add(id(v))
        items = v.values() if isinstance(v, dict) else v
        n = 1 + sum(size(x) for x in items)
        open_.discard(id(v))
        if n > MAX_VALUES:
            raise TooLarge(f"expands to more than {MAX_VALUES:,} values through its aliases")
        sizes[id(v)] = n
        return n

    size(data)


def compose(text: str):
    """``yaml.compose(text)`` (the node tree, with line marks). Raises TooDeep or any
    other ``yaml.YAMLError``."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except (RecursionError, MemoryError) as e:
        raise TooDeep(e) from None
