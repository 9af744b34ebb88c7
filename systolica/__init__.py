"""Systolica: a tiled systolic int8 accelerator, its compiler, and its verification.

Facts about the chip that every side reads live here: :mod:`systolica.config`
(one object describing a chip), :mod:`systolica.isa` (instruction formats) and
:mod:`systolica.timing` (when each instruction's effects happen).
"""
