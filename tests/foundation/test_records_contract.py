"""The records contract: every Parquet schema matches the data the producers hand to the recorder."""

from __future__ import annotations

from dataclasses import fields

from tui.base.gpu import GpuSample
from tui.engine.snapshot import StepTiming
from tui.records.gpu import GPU_SCHEMA
from tui.records.step import STEP_SCHEMA

TAGS = {"stage", "mode"}  # the recorder adds these to every step and GPU row


def test_step_schema_is_the_engines_step_timing_plus_stage_and_mode() -> None:
    assert set(STEP_SCHEMA.names) == {f.name for f in fields(StepTiming)} | TAGS


def test_gpu_schema_is_a_gpu_sample_plus_stage_and_mode() -> None:
    assert set(GPU_SCHEMA.names) == {f.name for f in fields(GpuSample)} | TAGS
