"""The live path: the bus between collectors and the processor, storage, and the processor itself."""
