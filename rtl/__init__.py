"""Amaranth description of the Systolica chip. Start at :class:`chip.Chip`."""
