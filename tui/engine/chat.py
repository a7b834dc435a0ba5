"""Chat prompts: a checkpoint's Jinja chat template rendered as transformers renders it, or the plain format.

transformers compiles ``chat_template`` in a sandboxed Jinja environment with ``trim_blocks`` and
``lstrip_blocks``, its own ``tojson`` (no HTML escaping), ``raise_exception``, ``strftime_now`` and the
loop-control extension, and renders it with ``messages``, ``tools``, ``documents``,
``add_generation_prompt`` and the tokenizer's special tokens (``bos_token``, ``eos_token``, ...) as
strings. :class:`ChatTemplate` does the same, so the prompt text is identical; the text is then
tokenized without adding special tokens again (the template wrote them), as ``apply_chat_template`` does.

The plain format (one ``"role: content"`` line per message, then ``"assistant:"``) is for the dummy
model and checkpoints that ship no template.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

Message = dict[str, Any]


def plain_prompt(messages: list[Message]) -> str:
    """One ``"role: content"`` line per message, then ``"assistant:"``."""
    return "".join(f"{m['role']}: {m.get('content') or ''}\n" for m in messages) + "assistant:"


class ChatTemplateError(ValueError):
    """The template refused the conversation (its ``raise_exception``) or failed to render it."""


class ChatTemplate:
    """One Jinja chat template with the special-token strings it is rendered with. Picklable."""

    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        self.source = source
        self.special_tokens = dict(special_tokens)
        self._compiled: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "special_tokens": self.special_tokens, "_compiled": None}

    def compile(self) -> Any:
        """The compiled template (compiled once); :class:`ChatTemplateError` if it does not compile."""
        if self._compiled is None:
            self._compiled = compile_template(self.source)
        return self._compiled

    def render(self, messages: list[Message], template_kwargs: dict[str, Any] | None = None) -> str:
        """The prompt for ``messages`` with the assistant's turn opened (``add_generation_prompt=True``).

        ``template_kwargs`` (a request's ``chat_template_kwargs``, as vLLM passes them: Qwen3's
        ``enable_thinking``) join the variables the template sees. Any failure of the template —
        its ``raise_exception`` or a Python error inside it — is a :class:`ChatTemplateError`: the
        request's fault, as vLLM answers it (400).
        """
        import jinja2

        context: dict[str, Any] = {"messages": messages, "tools": None, "documents": None,
                                   "add_generation_prompt": True, **self.special_tokens}
        context.update(template_kwargs or {})
        try:
            return self.compile().render(**context)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template refused the messages: {e}") from None
        except Exception as e:  # a Python error in the template (a missing key, a wrong type)
            raise ChatTemplateError(f"the chat template failed on the messages: {type(e).__name__}: {e}") from None


def compile_template(source: str) -> Any:
    """The template compiled in the environment transformers uses (``_compile_jinja_template``)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` (assistant-mask markers): rendered as its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"the chat template does not compile: {e} (line {e.lineno})") from None
