"""The micro-op IR: latency-insensitive instructions with the memory ranges they
touch (``ir``), derived from the instruction table so the scheduler's hazards are
exactly the chip's."""
