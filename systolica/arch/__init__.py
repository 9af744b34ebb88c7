"""Facts about the chip, read by the RTL, the compiler, the golden model and the tests:
:mod:`.config` (one object describing a chip), :mod:`.isa` (instructions),
:mod:`.timing` (when their effects happen), :mod:`.fabric` (the configurable
multiplexers), :mod:`.regs` (the register map)."""
