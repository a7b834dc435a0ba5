"""The headless front ends that run experiments: the recorder over HTTP (``recorder``), the virtual
clock (``virtual``), the capacity-edge sweep, the gain decomposition, calibration, and their progress."""
