"""kiln: the Python binding of Kiln, a C11 inference engine for transformer language models.

Two layers over libkiln.so (loaded with ctypes, see kiln._lib):
  - kiln.Llama: a drop-in for llama-cpp-python's llama_cpp.Llama (completions, chat, embeddings, with
    the same names, defaults and OpenAI-style dicts);
  - Kiln's own API: Model, Context, Batch, Sampler, Detokenizer, ChatTemplate, with logits and
    embeddings as numpy views of the library's buffers.
  - kiln.InferenceSession: ONNX models with onnxruntime's names (get_inputs, get_outputs, run).
Failures raise KilnError subclasses that carry the library's message and status name. See
docs/python.md.
"""

from .chat import ChatTemplate, template_names
from .errors import (
    AbortedError,
    ContextFullError,
    FormatError,
    InternalError,
    InvalidArgumentError,
    KilnError,
    KilnIOError,
    NotFoundError,
    OutOfMemoryError,
    RangeError,
    UnsupportedError,
)
from .grammar import LlamaGrammar, json_schema_to_gbnf
from .llama import LLAMA_DEFAULT_SEED, Llama, LlamaState
from .llama_speculative import LlamaDraftModel, LlamaModelDraft, LlamaPromptLookupDecoding
from .model import Batch, Context, Model, cpu_level, default_threads, set_cpu_level
from .onnx import InferenceSession, NodeArg, SessionOptions
from .sampler import Sampler
from .tokenizer import Detokenizer

__version__ = "0.1.0"

__all__ = [
    "AbortedError",
    "Batch",
    "ChatTemplate",
    "Context",
    "ContextFullError",
    "Detokenizer",
    "FormatError",
    "InferenceSession",
    "InternalError",
    "InvalidArgumentError",
    "KilnError",
    "KilnIOError",
    "LLAMA_DEFAULT_SEED",
    "Llama",
    "LlamaState",
    "LlamaGrammar",
    "LlamaDraftModel",
    "LlamaModelDraft",
    "LlamaPromptLookupDecoding",
    "Model",
    "NodeArg",
    "NotFoundError",
    "OutOfMemoryError",
    "RangeError",
    "Sampler",
    "SessionOptions",
    "UnsupportedError",
    "cpu_level",
    "default_threads",
    "json_schema_to_gbnf",
    "set_cpu_level",
    "template_names",
]
