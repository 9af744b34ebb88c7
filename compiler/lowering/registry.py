"""The one table of lowering rules, by op type. A rule registers itself where it is
defined (``@register``); :mod:`systolica.compiler.lowering.lower` imports every rule
module."""

from __future__ import annotations

from systolica.compiler.errors import InternalError
from systolica.compiler.lowering.rule import Rule

RULES: dict[type, Rule] = {}


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: the one rule for ``cls.op``."""
    if cls.op in RULES:
        raise InternalError(f"two lowering rules for {cls.op.__name__}: "
                            f"{type(RULES[cls.op]).__name__} and {cls.__name__}")
    RULES[cls.op] = cls()
    return cls


def rule_for(node) -> Rule:
    """The rule that lowers `node`'s op."""
    try:
        return RULES[type(node.op)]
    except KeyError:
        raise InternalError(f"no lowering rule for layer {node.name!r} "
                            f"({type(node.op).__name__})") from None
