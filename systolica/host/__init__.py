"""The host processor: numpy kernels that run between chip programs."""
