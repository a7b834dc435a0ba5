"""How much host memory a torch engine of a config will take, and whether this machine has it now.

A reset builds the new engine while the old one still runs (so a refused config leaves it running).
Profile validation bounds ``kv_budget_mb`` by physical memory and ``max_model_len`` by 2^20 tokens,
which is far beyond what a running machine can spare: a KV budget near physical memory, or one long
prompt's attention scores under a huge ``max_model_len``, took the engine process down, and the
server with it. So a reset first estimates the big allocations — the KV cache, the
weights, one layer's attention scores for the largest prefill a step can hold — and refuses a
config that does not fit in the memory available now with headroom kept free.
"""

from __future__ import annotations

from pathlib import Path

from tui.engine.model import PRESETS, ModelConfig
from tui.profile import EngineConfig

MIB = 1 << 20
HEADROOM_FRACTION = 0.10  # of the machine's memory, kept free beyond the estimate
MIN_HEADROOM_BYTES = 512 * MIB
SCORE_BYTES = 4  # attention scores are float32 on CPU
# Attention's peak is several copies of one layer's scores: the product, the product with the mask
# added, softmax's output. Measured peaks were 2.4-2.8x the single-copy estimate, which let configs
# through that then took the engine down; 3 copies covers them.
ATTENTION_PEAK_COPIES = 3
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge number (9223372036854771712)


class DoesNotFit(ValueError):
    """The config's engine would not fit in the memory available (one line, the sizes named)."""


def estimate_host_bytes(config: EngineConfig, on_cpu: bool) -> dict[str, int]:
    """The config's big host allocations by part; none unless ``on_cpu`` (on a GPU the KV cache,
    weights and activations are in device memory). The swap pool is left out: its host tensors are
    made only as requests are swapped out."""
    if not on_cpu:
        return {}
    model = PRESETS.get(config.model) if not config.model_path else None
    parts = {"KV cache": int(config.kv_budget_mb * MIB)}
    parts["weights"] = _checkpoint_bytes(config.model_path) if config.model_path else _preset_bytes(model)
    heads = model.num_heads if model is not None else 64  # a checkpoint's head count is not read here
    step_tokens = config.max_model_len
    if config.enable_chunked_prefill:
        step_tokens = min(step_tokens, config.max_num_batched_tokens)
    parts["attention scores"] = step_tokens * config.max_model_len * heads * SCORE_BYTES * ATTENTION_PEAK_COPIES
    return parts


def _preset_bytes(model: ModelConfig | None) -> int:
    if model is None:
        return 0
    h, inter, layers = model.hidden_size, model.intermediate_size, model.num_layers
    kv = 2 * model.num_kv_heads * model.dim_per_head * h
    per_layer = 2 * h * h + kv + 3 * h * inter
    embeddings = model.vocab_size * h * (1 if model.tie_embeddings else 2)
    return (layers * per_layer + embeddings) * 4  # float32 on CPU


def _checkpoint_bytes(model_path: str) -> int:
    try:
        return sum(p.stat().st_size for p in Path(model_path).expanduser().glob("*.safetensors"))
    except (OSError, RuntimeError):
        return 0


def available_bytes(root: Path = Path("/")) -> tuple[int, int] | None:
    """(memory available now, the machine's or the tightest cgroup's total), or None when unknown.
    ``root``: where ``/proc`` and ``/sys`` are (a fake tree in the tests)."""
    try:
        text = (root / "proc/meminfo").read_text()
        info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        avail = int(info["MemAvailable"].split()[0]) * 1024
        total = int(info["MemTotal"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    for limit, used in cgroup_limits(root):
        avail, total = min(avail, max(0, limit - used)), min(total, limit)
    return avail, total


def cgroup_limits(root: Path = Path("/")) -> list[tuple[int, int]]:
    """(limit, usage) of every memory cgroup this process is in that has a limit: its own and each
    one above it, cgroup v2 or v1.

    Why all of them: only ``/sys/fs/cgroup/memory.max`` was read, which is the process's own cgroup
    only inside a container's namespace; a limit set on a parent (a systemd slice, a job's cgroup with
    the process in a child) or a cgroup-v1 host went unseen, and ``kv_budget_mb = 12000`` passed in a
    2.5 GB cgroup and the engine was killed."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    out: list[tuple[int, int]] = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":  # v2: "0::/path"
            out += _walk(root / "sys/fs/cgroup", path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1: "4:memory:/path"
            out += _walk(root / "sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes")
    return out


def _walk(mount: Path, path: str, limit_file: str, usage_file: str) -> list[tuple[int, int]]:
    """The limited cgroups from ``path`` up to the mount's root (a path the namespace hides is skipped)."""
    out = []
    here = mount / path.strip("/")
    while True:
        try:
            limit_text = (here / limit_file).read_text().strip()
            if limit_text != "max" and int(limit_text) < UNLIMITED:
                out.append((int(limit_text), int((here / usage_file).read_text().strip())))
        except (OSError, ValueError):
            pass
        if here == mount or mount not in here.parents:
            return out
        here = here.parent


def check_fits(config: EngineConfig, on_cpu: bool) -> None:
    """Raise :class:`DoesNotFit` when the config's engine would not fit in the memory available now."""
    if config.backend == "simulated":
        return
    memory = available_bytes()
    if memory is None:
        return
    avail, total = memory
    parts = estimate_host_bytes(config, on_cpu)
    need = sum(parts.values())
    headroom = max(MIN_HEADROOM_BYTES, int(total * HEADROOM_FRACTION))
    if need + headroom > avail:
        shown = ", ".join(f"{name} {size / MIB:,.0f}" for name, size in parts.items() if size)
        raise DoesNotFit(
            f"an engine of this config needs about {need / MIB:,.0f} MiB ({shown}), but {avail / MIB:,.0f} MiB "
            f"are available with {headroom / MIB:,.0f} MiB kept free: lower engine.kv_budget_mb "
            "or engine.max_model_len")
