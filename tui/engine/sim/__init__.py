"""The simulated GPU: model and hardware presets, the vLLM-style memory split, a roofline step-time
model and its calibration. Pure Python and numpy (torch only to read the torch engine's own model presets).

The simulated backend (the engine with a model runner that computes nothing and releases each step
when its modelled time has elapsed) is built from these parts.
"""
