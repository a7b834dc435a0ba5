"""kvtui: see, and measure, what continuous batching and a paged KV cache buy over static batching."""

__version__ = "0.1.0"
