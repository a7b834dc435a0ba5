"""The records contract between load, metrics and the front ends: per-request, per-step and GPU
records, their Parquet schemas, the crash-safe writer and reader, and the one clock they share.

It sits below ``tui.load`` and ``tui.metrics`` and imports neither (see ARCHITECTURE.md).
"""
