"""The torch backend: a real decoder (seeded dummy weights or a local checkpoint) and its KV tensors."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from tui.base.clock import now as records_now
from tui.engine.checkpoint import load_checkpoint
from tui.engine.kv import slots_for_budget
from tui.engine.model import PRESETS, DecoderModel, build_dummy_model, pick_device, pick_dtype
from tui.engine.model_runner import TorchModelRunner
from tui.engine.runner import ModelRunner
from tui.engine.tokenizer import ByteTokenizer, Tokenizer
from tui.profile import EngineConfig

_GPU_HEADROOM_BYTES = 1 << 30  # activations and allocator slack left outside the KV budget


def host_blocks(config: EngineConfig, bytes_per_token: int) -> int:
    """The host pool swapped-out KV waits in: swap_space_gb of the same per-token layout, whole blocks."""
    return int(config.swap_space_gb * (1 << 30)) // bytes_per_token // config.block_size


class TorchBackend:
    """A real model on the CPU or CUDA; every step is timed as it runs (see :class:`tui.engine.backend.Backend`)."""

    clock: Callable[[], float] | None = None  # the engine's own
    timer: Callable[[], float] = staticmethod(time.perf_counter)
    stamp: Callable[[], float] = staticmethod(records_now)
    frontend_s = 0.0  # no modelled serving path: a server's own runs in front of it

    def __init__(self, config: EngineConfig) -> None:
        # engine.threads, torch's intra-op threads: left at torch's default (every core), a step's CPU
        # time would also count the idle threads' spin-waits, and it races the load generator
        torch.set_num_threads(max(1, config.threads))
        self.device = pick_device(config.device)
        torch.manual_seed(config.seed)
        self.tokenizer: Tokenizer
        self.model: DecoderModel
        if config.model_path:
            ckpt = load_checkpoint(config.model_path, self.device, config.dtype, config.served_model_name)
            self.model, self.tokenizer, self.model_name, self.torch_dtype = ckpt.model, ckpt.tokenizer, ckpt.name, ckpt.dtype
            self.max_model_len = min(config.max_model_len, self.model.config.max_position)
        else:
            self.torch_dtype = pick_dtype(self.device, config.dtype)
            self.model = build_dummy_model(config.model, config.seed, self.device, self.torch_dtype)
            self.tokenizer = ByteTokenizer(PRESETS[config.model].vocab_size)
            self.model_name = config.served_model_name or self.model.config.name
            self.max_model_len = config.max_model_len
        mc = self.model.config
        self.sliding_window = mc.sliding_window
        self.vocab_size = mc.vocab_size
        self.bytes_per_token = mc.kv_bytes_per_token(self.torch_dtype)
        self.num_slots = slots_for_budget(self._budget_bytes(config), self.bytes_per_token, config.block_size)
        if self.num_slots < config.block_size:
            raise ValueError(
                f"a KV budget of {config.kv_budget_mb} MB holds no {config.block_size}-token block "
                f"({self.bytes_per_token} bytes per token); raise kv_budget_mb"
            )
        self.host_blocks = host_blocks(config, self.bytes_per_token)
        self.runner = TorchModelRunner(self.model, self.num_slots, config.block_size, self.host_blocks * config.block_size)
        self.device_label = (
            f"cuda:{self.device.index or 0} ({torch.cuda.get_device_name(self.device)})"
            if self.device.type == "cuda" else "cpu"
        )

    @property
    def dtype(self) -> str:
        """The weights' and KV's dtype as torch names it (``bfloat16``): the engine reports it."""
        return str(self.torch_dtype).removeprefix("torch.")

    def _budget_bytes(self, config: EngineConfig) -> int:
        if self.device.type == "cuda" and config.gpu_memory_utilization is not None:
            free, total = torch.cuda.mem_get_info(self.device)
            allowed = total * config.gpu_memory_utilization - (total - free) - _GPU_HEADROOM_BYTES
            return max(int(allowed), 0)
        return int(config.kv_budget_mb * (1 << 20))

    def begin_step(self, busy: bool) -> float:
        """Whoever has arrived joins: the step begins now."""
        return math.inf

    def woke(self) -> None:
        """Steps are timed as they run: a wait changes nothing."""

    def stretch_parts(self, runner: ModelRunner) -> None:
        """Real steps cannot be skipped."""
        return None

    def info(self) -> dict[str, Any] | None:
        return None
