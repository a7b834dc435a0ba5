"""Helpers the tests and benchmarks share: seeded fixtures built with the engine's own accounting."""
