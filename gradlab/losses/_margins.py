"""Registered by its own module; filled in as the loss zoo grows."""
