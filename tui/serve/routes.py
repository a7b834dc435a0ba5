"""Every path ``kvtui serve`` answers, defined once: the server routes them, the clients call them.

The control API (``/kvtui/v1/...``) is kvtui's own; :mod:`tui.serve.control_client` is its one client.
The rest is the OpenAI-compatible surface and the usual health and Prometheus endpoints.
"""

from __future__ import annotations

# The OpenAI-compatible API and the usual operational endpoints.
COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"
MODELS = "/v1/models"
MODEL = "/v1/models/{model_id:path}"  # GET -> the model's card, 404 for another name (ids may hold "/")
TOKENIZE = "/tokenize"  # POST {"prompt"} or {"messages"} -> {"count", "max_model_len", "tokens"} (vLLM's)
DETOKENIZE = "/detokenize"  # POST {"tokens"} -> {"prompt"} (vLLM's)
VERSION = "/version"  # GET -> {"version"} (vLLM's)
HEALTH = "/health"
METRICS = "/metrics"

# The control API: the engine's state and its controls (the dashboard's and the recorder's).
STATE = "/kvtui/v1/state"  # GET  -> {"engine": EngineSnapshot, "gpu": [GpuSample]}
STEPS = "/kvtui/v1/steps"  # GET ?since=N -> {"steps": [StepTiming]}
PAUSE = "/kvtui/v1/pause"  # POST -> state
RESUME = "/kvtui/v1/resume"  # POST -> state
STEP = "/kvtui/v1/step"  # POST -> state; 409 "not_paused" unless paused
MODE = "/kvtui/v1/mode"  # POST {"batching", "kv"} or {"mode"}, and/or {"preemption_mode"} -> state
DEFENSES = "/kvtui/v1/defenses"  # POST DefensesConfig -> state
RESET = "/kvtui/v1/reset"  # POST {"engine", "defenses"} -> state
