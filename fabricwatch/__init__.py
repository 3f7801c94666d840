"""fabricwatch: observability and fault diagnosis for GPU supernodes and their optical fabric."""

__version__ = "0.1.0"
