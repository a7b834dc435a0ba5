"""``kvtui serve``: the local engine behind an OpenAI-compatible API, ``/metrics`` and a control API.

``app`` (the HTTP side, ``serve_main``), ``routes`` (every path, once), ``engine_loop`` +
``engine_proc`` (the engine in its own process) + ``engine_messages`` (what they send), ``generate`` (one
request's stream); the OpenAI wire format: ``fields`` (every request field and what happens to it),
``protocol`` (request parsing), ``responses`` (bodies and chunks), ``text`` (token ids to text),
``tokenize`` (``/tokenize``, ``/detokenize``), ``errors``; ``prom`` (metrics), ``local`` (``LocalServer``: the server as a child process of the
dashboard or the recorder), ``control_client`` (the one client of the control API).
"""
