"""What every layer may use: the records' clock, user-facing error text, the NVML reader, the
tokenizer.json loader, the child-process helper and provenance. Nothing here imports another layer."""
