"""Chat templates (kiln_chat_template): the conversation formats of instruction-tuned models, recognized
from a model's tokenizer.chat_template by the markers they contain ("chatml", "llama3", "phi3",
"mistral") and "plain", Kiln's "User: ...\\nAssistant:" fallback. Kiln does not run Jinja."""

from __future__ import annotations

import ctypes
from ctypes import byref
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence

from . import _lib
from ._lib import check, lib

if TYPE_CHECKING:
    from .model import Model


def template_names() -> List[str]:
    """The names of the templates Kiln knows."""
    return [n.strip() for n in lib.kiln_chat_template_names().decode("ascii").split(",")]


def message_text(content: Any) -> str:
    """The text of a message's content: a string, None (""), or OpenAI's list of parts, whose "text"
    parts are joined (Kiln's templates carry text only)."""
    if content is None:
        return ""
    if isinstance(content, (str, bytes)):
        return content if isinstance(content, str) else content.decode("utf-8")
    parts = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif isinstance(part, str):
            parts.append(part)
        else:
            raise ValueError(f"chat message part {part!r} is not text; Kiln's templates carry text only")
    return "".join(parts)


class ChatTemplate:
    """A static chat template. Get one with ChatTemplate.by_name(name) or ChatTemplate.detect(model)."""

    def __init__(self, handle: int) -> None:
        self._handle = handle

    @classmethod
    def by_name(cls, name: str) -> "ChatTemplate":
        """The template called name; ValueError for an unknown one (the message lists the known)."""
        h = lib.kiln_chat_template_by_name(name.encode("utf-8"))
        if not h:
            raise ValueError(f"unknown chat template '{name}' (known: {', '.join(template_names())})")
        return cls(h)

    @classmethod
    def detect(cls, model: "Model") -> Optional["ChatTemplate"]:
        """The template of a model's tokenizer.chat_template; None when the file has none. Raises
        UnsupportedError when Kiln does not recognize it."""
        out = _lib.template_p()
        status = lib.kiln_chat_template_detect(lib.kiln_model_gguf(model.handle), byref(out))
        if status == _lib.KILN_E_NOT_FOUND:
            return None
        check(status, "chat template")
        return cls(out.value)

    @property
    def name(self) -> str:
        return lib.kiln_chat_template_name(self._handle).decode("ascii")

    @property
    def end_of_turn(self) -> Optional[str]:
        """The text of the token that ends an assistant turn ("<|im_end|>"), or None when EOS does."""
        s = lib.kiln_chat_template_end_of_turn(self._handle)
        return s.decode("utf-8") if s else None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """The conversation as text, without BOS: messages are {"role": "system" | "user" | "assistant",
        "content": str}; add_generation_prompt appends the header that opens the assistant's reply."""
        keep: List[bytes] = []  # the encoded strings must outlive the call
        arr = (_lib.kiln_chat_message * max(len(messages), 1))()
        for i, m in enumerate(messages):
            role = _lib.encode(m.get("role", ""), "message role")
            text = _lib.encode(message_text(m.get("content")), "message content")
            if b"\0" in role or b"\0" in text:
                raise ValueError("chat messages must not contain NUL characters")
            keep += [role, text]
            arr[i].role, arr[i].content = role, text
        n = ctypes.c_size_t(0)
        cap = 256 + sum(len(k) for k in keep) * 2
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            status = lib.kiln_chat_render(
                self._handle, arr, len(messages), add_generation_prompt, buf, cap, byref(n)
            )
            if status == _lib.KILN_E_RANGE and n.value + 1 > cap:
                cap = n.value + 1
                continue
            check(status, "chat template")
            return buf.raw[: n.value].decode("utf-8")
        raise _lib.error(_lib.KILN_E_RANGE, "chat template")

    def __repr__(self) -> str:
        return f"ChatTemplate({self.name!r})"
