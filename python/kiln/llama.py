"""kiln.Llama: a drop-in for llama-cpp-python's llama_cpp.Llama over Kiln.

The names, defaults and return shapes are llama-cpp-python's (0.3.x): the constructor, __call__ and
create_completion (OpenAI "text_completion" dicts, or an iterator of chunks with stream=True),
create_chat_completion ("chat.completion" dicts or "chat.completion.chunk" iterators), tokenize,
detokenize, embed, create_embedding, n_ctx, n_vocab, n_embd, reset, close. A script written for
llama_cpp.Llama runs unchanged once its import says ``from kiln import Llama``. What differs is listed
in docs/python.md.

One Llama holds one Model and one Context (sequence 0). Between calls it remembers which tokens its KV
cache holds, and a prompt that starts with them is evaluated only from where it differs, as
llama-cpp-python does. A Llama is used by one thread at a time.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _generate
from .chat import ChatTemplate
from .errors import UnsupportedError
from .llama_speculative import LlamaDraftModel, LlamaModelDraft
from .grammar import GrammarMatcher, GrammarVocab, LlamaGrammar, response_format_grammar
from .model import Context, Model

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama-cpp-python's "random seed"

# llama-cpp-python's chat_format names for Kiln's templates.
_CHAT_FORMATS = {"chatml": "chatml", "llama-3": "llama3", "llama3": "llama3", "mistral-instruct": "mistral",
                 "mistral": "mistral", "phi3": "phi3", "phi-3": "phi3", "plain": "plain"}
# GGML type numbers of type_k/type_v that Kiln's KV cache can hold.
_KV_TYPES = {0: "f32", 1: "f16", 8: "q8_0"}


class LlamaState:
    """A saved Llama state, with llama-cpp-python's fields."""

    def __init__(self, input_ids: np.ndarray, scores: np.ndarray, n_tokens: int, llama_state: bytes,
                 llama_state_size: int, seed: int) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed


class Llama:
    """A model and one context, with llama-cpp-python's high-level API.

    Args:
        model_path: the GGUF file.
        seed: the random seed; -1 or 0xFFFFFFFF (the default) draws one at random.
        n_ctx: KV-cache size in tokens; 0 = the model's context length.
        n_batch: the most tokens evaluated in one step.
        n_threads: CPU threads; None = the physical cores.
        embedding: embedding mode (embed, create_embedding). Required for an encoder (BERT), which is
            switched to it by itself; a decoder (llama, qwen, ...) refuses it with UnsupportedError.
        last_n_tokens_size: how many recent tokens the repeat penalty looks at.
        chat_format: a chat template name ("chatml", "llama-3", "mistral-instruct", "phi3", "plain");
            None = recognized from the model's tokenizer.chat_template, "plain" when it has none.
        type_k, type_v: KV-cache type as GGML type numbers (0 f32, 1 f16, 8 q8_0; both the same);
            None = f32, Kiln's default.
        verbose: print the runtime's log and the ignored arguments to stderr.
        devices: Kiln's backend list ("cpu" by default), as kiln_model_params.devices.
        n_gpu_layers: llama-cpp-python's: 0 (the default) keeps every layer on the CPU unless devices names
            a device (then every layer runs there); -1 puts all of them, N the last N, on a GPU (devices
            "auto" unless devices names one), as kiln_model_params.gpu_layers.
        **kwargs: other llama-cpp-python arguments (use_mmap, flash_attn, ...) are
            accepted and ignored; with verbose, a warning names them.

    Raises:
        KilnError: loading failed (KilnIOError for a missing file, naming it).
    """

    def __init__(
        self,
        model_path: str,
        *,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_threads: Optional[int] = None,
        embedding: bool = False,
        last_n_tokens_size: int = 64,
        chat_format: Optional[str] = None,
        type_k: Optional[int] = None,
        type_v: Optional[int] = None,
        verbose: bool = True,
        devices: Optional[str] = None,
        n_gpu_layers: int = 0,
        draft_model: Optional[LlamaDraftModel] = None,
        **kwargs: Any,
    ) -> None:
        self._model: Optional[Model] = None
        self._ctx: Optional[Context] = None
        self.model_path = model_path
        self.verbose = verbose
        self.last_n_tokens_size = last_n_tokens_size
        self.draft_model = draft_model  # guesses verified in one batch (kiln.llama_speculative)
        if kwargs and verbose:
            names = ", ".join(sorted(kwargs))
            warnings.warn(f"kiln.Llama ignores these llama-cpp-python arguments: {names}", stacklevel=2)
        kv_type = self._kv_type(type_k, type_v)
        # n_gpu_layers 0 with devices named keeps Kiln's meaning of devices (every layer there); without
        # devices it is the CPU alone, as in llama-cpp-python.
        gpu_layers = 0 if n_gpu_layers <= 0 else int(n_gpu_layers)  # kiln: 0 = every layer
        if n_gpu_layers != 0:
            devices = devices or "auto"
        self._model = Model(model_path, n_threads=n_threads, devices=devices, gpu_layers=gpu_layers)
        if isinstance(draft_model, LlamaModelDraft):
            draft_model.check_vocabulary(self._model)
        self.embedding = bool(embedding) or not self._model.is_causal
        log = (lambda line: print(f"kiln: {line}", file=sys.stderr)) if verbose else None
        n_ctx = n_ctx if n_ctx > 0 else self._model.n_ctx_train
        n_batch = max(1, min(n_batch, n_ctx))
        self._ctx = Context(
            self._model,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_seq_max=64 if self.embedding else 1,
            kv_type=kv_type,
            embeddings=self.embedding,
            log=log,
        )
        self.n_batch = n_batch
        self.set_seed(seed)
        self._cached: List[int] = []  # the tokens sequence 0 holds (see _sync_cache)
        self._pending: Optional[Any] = None  # (prompt, completion) of the last completion started
        self._chat_template = self._choose_template(chat_format)
        self.chat_format = self._chat_template.name
        eot = self._chat_template.end_of_turn
        self._eog = sorted({t for t in (self._model.eos, self._model.find_token(eot) if eot else -1) if t >= 0})
        self._gvocab: Optional[GrammarVocab] = None

    @staticmethod
    def _kv_type(type_k: Optional[int], type_v: Optional[int]) -> str:
        if type_k is None and type_v is None:
            return "f32"
        k = type_k if type_k is not None else type_v
        v = type_v if type_v is not None else type_k
        if k != v or k not in _KV_TYPES:
            raise ValueError(f"type_k={type_k}, type_v={type_v}: Kiln's KV cache holds K and V in one type, "
                             "f32 (0), f16 (1) or q8_0 (8)")
        return _KV_TYPES[k]

    # -- lifetime --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context and the model. Idempotent."""
        if getattr(self, "_gvocab", None) is not None:
            self._gvocab.close()
            self._gvocab = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        if self._model is not None:
            self._model.close()
            self._model = None

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def model(self) -> Model:
        """The kiln.Model underneath (Kiln's lower layer)."""
        if self._model is None:
            raise ValueError("the Llama is closed")
        return self._model

    @property
    def ctx(self) -> Context:
        """The kiln.Context underneath."""
        if self._ctx is None:
            raise ValueError("the Llama is closed")
        return self._ctx

    # -- facts -----------------------------------------------------------------------------------------

    def n_ctx(self) -> int:
        """The context window size."""
        return self.ctx.n_ctx

    def n_vocab(self) -> int:
        """The vocabulary size."""
        return self.model.n_vocab

    def n_embd(self) -> int:
        """The embedding size."""
        return self.model.n_embd

    def token_bos(self) -> int:
        return self.model.bos

    def token_eos(self) -> int:
        return self.model.eos

    def pooling_type(self) -> str:
        return self.model.pooling

    @property
    def metadata(self) -> Dict[str, str]:
        """The model file's scalar metadata, as strings."""
        return self.model.metadata()

    def set_seed(self, seed: int) -> None:
        """Seed the generator from which each completion without a seed draws its own."""
        self._seed = seed
        random_seed = seed in (-1, LLAMA_DEFAULT_SEED)
        self._rng = random.Random() if random_seed else random.Random(seed)

    def reset(self) -> None:
        """Forget the evaluated tokens (the KV cache)."""
        self.ctx.reset()
        self._cached = []

    # -- state ----------------------------------------------------------------------------------------

    def save_state(self) -> "LlamaState":
        """The evaluated tokens and their KV cache, as llama-cpp-python's save_state returns them
        (``llama_state`` holds the bytes of a Kiln state file, kiln_ctx_state_save's format; ``scores``
        is empty: Kiln keeps no per-token logits)."""
        self._sync_cache()
        data = self.ctx.state_get(0, self._cached)
        return LlamaState(np.array(self._cached, dtype=np.intc), np.empty((0, self.n_vocab()), np.float32),
                          len(self._cached), data, len(data), self._seed)

    def load_state(self, state: "LlamaState") -> None:
        """Restore what save_state saved: the next completion whose prompt starts with those tokens
        continues from the restored cache exactly as the saved Llama would have. A state of another
        model or cache type, or a corrupt one, raises a named KilnError and leaves the cache empty."""
        self.ctx.reset()
        self._cached = []
        self._pending = None
        self._cached = self.ctx.state_set(0, bytes(state.llama_state))
        self._seed = state.seed

    # -- tokens ----------------------------------------------------------------------------------------

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of UTF-8 text.

        Args:
            text: the text, as bytes (str is accepted too).
            add_bos: add the special tokens that open (and, for WordPiece, close) a sequence, as the
                vocabulary asks: BOS, or [CLS] ... [SEP].
            special: turn the texts of control tokens (such as "<|im_end|>") into those tokens.
        """
        ids = self.model.tokenize(text, add_bos=add_bos, special=special)
        if add_bos and self.model.add_eos and self.model.eos >= 0:
            ids.append(self.model.eos)
        return ids

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        """The UTF-8 bytes of tokens. The space the tokenizer put before the first word is dropped when
        tokens start with BOS and prev_tokens is None. Control tokens print nothing unless special is
        set, which prints their text."""
        tokens = [int(t) for t in tokens]
        strip = prev_tokens is None and len(tokens) > 0 and tokens[0] == self.model.bos
        if not special:
            return self.model.detokenize(tokens, strip_leading_space=strip)
        out, run = b"", []  # control tokens' texts between runs of ordinary tokens
        for t in tokens:
            if self.model.token_attr(t) == 3:  # KILN_TOKEN_CONTROL
                out += self.model.detokenize(run, strip_leading_space=strip and not out) + self.model.token_text(t)
                run = []
            else:
                run.append(t)
        return out + self.model.detokenize(run, strip_leading_space=strip and not out)

    # -- embeddings ------------------------------------------------------------------------------------

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """Sentence embeddings: a list of floats for a str, a list of them for a list of str.

        Kiln's pooled embeddings are always scaled to unit length (as sentence-transformers'
        Normalize does), so normalize changes nothing. With truncate, a text longer than n_batch tokens
        is cut to n_batch, keeping its closing [SEP]; without it, such a text raises ValueError. With
        return_count, returns (embeddings, total token count).
        """
        if not self.embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        inputs = [input] if isinstance(input, str) else list(input)
        tokenized = [self._embed_tokens(text, truncate) for text in inputs]
        n_seq_max = self.ctx.n_seq_max
        data: List[List[float]] = []
        group: List[List[int]] = []
        for ids in tokenized:  # whole texts packed into batches, as `kiln embed` packs them
            if group and (sum(map(len, group)) + len(ids) > self.n_batch or len(group) >= n_seq_max):
                data += self._embed_batch(group)
                group = []
            group.append(ids)
        if group:
            data += self._embed_batch(group)
        total = sum(map(len, tokenized))
        output = data[0] if isinstance(input, str) else data
        return (output, total) if return_count else output

    def _embed_tokens(self, text: str, truncate: bool) -> List[int]:
        ids = self.tokenize(text.encode("utf-8"), add_bos=True)
        if len(ids) > self.n_batch:
            if not truncate:
                raise ValueError(f"Requested tokens ({len(ids)}) exceed batch size of {self.n_batch}")
            keep_eos = self.model.add_eos and ids[-1] == self.model.eos
            ids = ids[: self.n_batch - 1] + [ids[-1]] if keep_eos else ids[: self.n_batch]
        if not ids:
            raise ValueError("a text has no tokens and the model adds none")
        return ids

    def _embed_batch(self, group: List[List[int]]) -> List[List[float]]:
        from .model import Batch

        with Batch(sum(map(len, group))) as batch:
            for seq, ids in enumerate(group):
                batch.add_sequence(ids, seq_id=seq, logits="none")
            self.ctx.decode_batch(batch)
            return [self.ctx.embeddings(seq).tolist() for seq in range(len(group))]

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        """OpenAI-style embeddings: {"object": "list", "data": [{"object": "embedding", "embedding":
        [...], "index": i}], "model": ..., "usage": {"prompt_tokens", "total_tokens"}}."""
        inputs = input if isinstance(input, list) else [input]
        embeds, total = self.embed(inputs, return_count=True)
        return {
            "object": "list",
            "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
            "model": model if model is not None else self.model_path,
            "usage": {"prompt_tokens": total, "total_tokens": total},
        }

    # -- completions -----------------------------------------------------------------------------------

    def __call__(self, prompt: Union[str, List[int]], *args: Any, **kwargs: Any) -> Any:
        """create_completion(prompt, ...)."""
        return self.create_completion(prompt, *args, **kwargs)

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Optional[Any] = None,
        logits_processor: Optional[Any] = None,
        grammar: Optional[Any] = None,
        logit_bias: Optional[Dict[int, float]] = None,
    ) -> Any:
        """Generate text from a prompt (a str, or token ids).

        Returns {"id", "object": "text_completion", "created", "model", "choices": [{"text", "index",
        "logprobs", "finish_reason"}], "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}},
        or with stream=True an iterator of such chunks without "usage", one per piece of new text and a
        last one with text "" and the finish_reason ("stop" or "length").

        max_tokens None or <= 0 means up to the end of the context. stop strings end the text before
        them; logprobs=N adds the top N alternatives of each generated token (and, with echo, of the
        prompt's). grammar (a LlamaGrammar, or GBNF text) constrains the text to the grammar's sentences
        (docs/grammar.md): the completion ends ("stop") when the grammar allows nothing more. typical_p,
        tfs_z and mirostat are not supported: other values than their defaults raise NotImplementedError.
        """
        _unsupported(suffix=(suffix, None), typical_p=(typical_p, 1.0), tfs_z=(tfs_z, 1.0),
                     mirostat_mode=(mirostat_mode, 0))
        if isinstance(grammar, str):
            grammar = LlamaGrammar.from_string(grammar)
        if grammar is not None and not isinstance(grammar, LlamaGrammar):
            raise TypeError(f"grammar must be a LlamaGrammar or GBNF text, not {type(grammar).__name__}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        sampling = _generate.Sampling(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty,
            repeat_last_n=self.last_n_tokens_size, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, seed=self._draw_seed(seed), logit_bias=logit_bias,
            logits_processor=logits_processor, stopping_criteria=stopping_criteria,
        )
        if isinstance(prompt, str):
            prompt_text = prompt
            prompt_tokens = self.model.tokenize(prompt, add_bos=self.model.add_bos, special=True)
        else:
            prompt_tokens = [int(t) for t in prompt]
            prompt_text = self.detokenize(prompt_tokens).decode("utf-8", "ignore")
        chunks = self._completion(prompt_tokens, prompt_text, max_tokens, stops, sampling, logprobs, echo,
                                  model or self.model_path, grammar)
        return _streamed(chunks) if stream else _collect(chunks)

    def _completion(self, prompt_tokens: List[int], prompt_text: str, max_tokens: Optional[int],
                    stops: List[str], sampling: "_generate.Sampling", logprobs: Optional[int], echo: bool,
                    model_name: str, grammar: Optional[LlamaGrammar] = None) -> Iterator[Dict[str, Any]]:
        if self.embedding:
            raise RuntimeError("this Llama computes embeddings (embedding=True); it cannot generate text")
        n_ctx = self.n_ctx()
        if len(prompt_tokens) >= n_ctx:
            raise ValueError(f"Requested tokens ({len(prompt_tokens)}) exceed context window of {n_ctx}")
        if not prompt_tokens:
            raise ValueError("the prompt is empty and the model adds no BOS token")
        if max_tokens is None or max_tokens <= 0 or max_tokens + len(prompt_tokens) > n_ctx:
            max_tokens = n_ctx - len(prompt_tokens)
        req = _generate.Request(
            prompt_tokens=prompt_tokens, max_tokens=max_tokens, stop=[s.encode("utf-8") for s in stops if s],
            stop_tokens=self._eog, strip_leading_space=(prompt_text == ""), logprobs=logprobs, sampling=sampling,
            grammar=GrammarMatcher(grammar, self._grammar_vocab()) if grammar is not None else None,
            draft_model=self.draft_model, n_batch=self.n_batch,
        )
        return self._stream(req, prompt_text, echo, model_name)

    def _grammar_vocab(self) -> GrammarVocab:
        """The token trie for grammars, made on first use; EOS and the end of turn end a text."""
        if self._gvocab is None:
            self._gvocab = GrammarVocab(self._model.vocab_handle, self._eog)
        return self._gvocab

    def _stream(self, req: "_generate.Request", prompt_text: str, echo: bool,
                model_name: str) -> Iterator[Dict[str, Any]]:
        """The chunks of one completion (a generator: nothing runs until the first chunk is asked for).
        The last one carries "usage" for _collect, which removes it from streamed chunks."""
        cid, created = f"cmpl-{uuid.uuid4()}", int(time.time())
        echo_logprobs = echo and req.logprobs is not None
        first_logits, prompt_rows = self._eval_prompt(req.prompt_tokens, all_logits=echo_logprobs)
        completion: List[int] = []
        self._pending = (req.prompt_tokens, completion)
        text_so_far = prompt_text if echo else ""
        offset0 = 0 if echo else len(prompt_text)

        def chunk(text: str, lp: Optional[Dict[str, Any]], finish: Optional[str]) -> Dict[str, Any]:
            return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
                    "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}]}

        if echo:
            lp = self._prompt_logprobs(req, prompt_rows) if echo_logprobs else None
            if prompt_text or lp:
                yield chunk(prompt_text, lp, None)
        for event in _generate.generate(self.model, self.ctx, first_logits, req, completion):
            if event[0] == "text":
                piece = event[1].decode("utf-8", "replace")
                lp = None
                if req.logprobs is not None:
                    lp = _logprobs_dict(event[2], offset0 + len(text_so_far))
                text_so_far += piece
                if piece or lp:
                    yield chunk(piece, lp, None)
            else:
                last = chunk("", None, event[1])
                last["usage"] = {"prompt_tokens": len(req.prompt_tokens), "completion_tokens": len(completion),
                                 "total_tokens": len(req.prompt_tokens) + len(completion)}
                yield last

    def _sync_cache(self) -> None:
        """Bring _cached up to date with what the last completion left in the KV cache."""
        if self._pending is not None:
            prompt, completion = self._pending
            self._cached = (prompt + completion)[: self.ctx.n_past]
            self._pending = None

    def _eval_prompt(self, tokens: List[int], all_logits: bool) -> "tuple[np.ndarray, Optional[np.ndarray]]":
        """Evaluate tokens into sequence 0, reusing the cached prefix they share (at least the last token
        is evaluated, for its logits). Returns the last token's logits and, with all_logits, a copy of
        every prompt token's logits ([n, n_vocab]; then nothing is reused)."""
        self._sync_cache()
        ctx = self.ctx
        keep = 0
        if not all_logits:
            limit = min(len(self._cached), len(tokens) - 1)
            while keep < limit and self._cached[keep] == tokens[keep]:
                keep += 1
        if keep == 0:
            ctx.reset()
        elif ctx.n_past > keep:
            ctx.kv_seq_rm(0, keep, -1)
        self._cached = tokens[:keep]
        if not all_logits:
            logits = ctx.decode(tokens[keep:])
            self._cached = list(tokens)
            return logits, None
        from .model import Batch

        rows = np.empty((len(tokens), self.n_vocab()), dtype=np.float32)
        with Batch(self.n_batch) as batch:
            for start in range(0, len(tokens), self.n_batch):
                part = tokens[start : start + self.n_batch]
                batch.clear()
                batch.add_sequence(part, seq_id=0, pos0=start, logits="all")
                ctx.decode_batch(batch)
                for i in range(len(part)):
                    rows[start + i] = ctx.logits(i)
        self._cached = list(tokens)
        return rows[-1], rows

    def _prompt_logprobs(self, req: "_generate.Request", rows: Optional[np.ndarray]) -> Dict[str, Any]:
        """Echo's logprobs of the prompt tokens (BOS left out); the first token has none, as in OpenAI's
        API. Token j is scored by the logits of token j - 1."""
        entries, offsets, text = [], [], ""
        toks = req.prompt_tokens
        for j, t in enumerate(toks):
            if t == self.model.bos:
                continue
            if j == 0 or rows is None:
                piece = self.model.detokenize([t]).decode("utf-8", "ignore")
                entries.append((piece, None, None))
            else:
                entries.append(_generate.logprob_entry(self.model, t, rows[j - 1], req.logprobs or 0))
            offsets.append(len(text))
            text += entries[-1][0]
        if entries:
            entries[0] = (entries[0][0], None, None)
        return {"tokens": [e[0] for e in entries], "text_offset": offsets,
                "token_logprobs": [e[1] for e in entries], "top_logprobs": [e[2] for e in entries]}

    def _draw_seed(self, seed: Optional[int]) -> int:
        if seed is not None and seed not in (-1, LLAMA_DEFAULT_SEED):
            return int(seed)
        if seed is not None:
            return random.SystemRandom().randint(0, 2**32)
        return self._rng.randint(0, 2**32)

    # -- chat ------------------------------------------------------------------------------------------

    def _choose_template(self, chat_format: Optional[str]) -> ChatTemplate:
        if chat_format is not None:
            name = _CHAT_FORMATS.get(chat_format)
            if name is None:
                raise ValueError(f"chat_format '{chat_format}' is not one Kiln has "
                                 f"(known: {', '.join(sorted(_CHAT_FORMATS))})")
            return ChatTemplate.by_name(name)
        try:
            found = ChatTemplate.detect(self.model)
        except UnsupportedError as e:
            if self.verbose:
                print(f"kiln: {e.message}; using the 'plain' chat template", file=sys.stderr)
            found = None
        return found or ChatTemplate.by_name("plain")

    def create_chat_completion(
        self,
        messages: List[Mapping[str, Any]],
        functions: Optional[List[Any]] = None,
        function_call: Optional[Any] = None,
        tools: Optional[List[Any]] = None,
        tool_choice: Optional[Any] = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        seed: Optional[int] = None,
        response_format: Optional[Any] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Optional[Any] = None,
        grammar: Optional[Any] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
    ) -> Any:
        """Reply to a conversation: messages are {"role": "system" | "user" | "assistant", "content"},
        rendered with the model's chat template (chat_format). Generation ends at EOS, at the template's
        end-of-turn token, at a stop string or after max_tokens (None: the end of the context).

        Returns {"id": "chatcmpl-...", "object": "chat.completion", "created", "model", "choices":
        [{"index", "message": {"role": "assistant", "content"}, "logprobs", "finish_reason"}], "usage"},
        or with stream=True an iterator of "chat.completion.chunk" dicts: the first with delta
        {"role": "assistant"}, then deltas {"content": ...}, the last with delta {} and the
        finish_reason. response_format ({"type": "json_object"} with an optional "schema", or OpenAI's
        {"type": "json_schema", "json_schema": {"schema": ...}}) and grammar constrain the reply
        (docs/grammar.md). Functions and tools are not supported.
        """
        _unsupported(functions=(functions, None), function_call=(function_call, None), tools=(tools, None),
                     tool_choice=(tool_choice, None))
        fmt_grammar = response_format_grammar(response_format)
        if fmt_grammar is not None and grammar is not None:
            raise ValueError("give either grammar or a JSON response_format, not both")
        grammar = fmt_grammar if fmt_grammar is not None else grammar
        prompt = self._chat_template.render(messages, add_generation_prompt=True)
        prompt_tokens = self.model.tokenize(prompt, add_bos=self.model.add_bos, special=True)
        result = self.create_completion(
            prompt_tokens, max_tokens=max_tokens, temperature=temperature, top_p=top_p, min_p=min_p,
            typical_p=typical_p, logprobs=top_logprobs if logprobs else None, stop=stop,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, top_k=top_k, stream=stream, seed=seed, tfs_z=tfs_z,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
            logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias,
        )
        return _chat_chunks(result) if stream else _chat_response(result)


def _unsupported(**args: "tuple[Any, Any]") -> None:
    for name, (value, default) in args.items():
        if value != default and value is not None:
            raise NotImplementedError(f"kiln.Llama does not support {name}={value!r}")


def _logprobs_dict(entries: List[Any], offset: int) -> Dict[str, Any]:
    offsets, text = [], 0
    for e in entries:
        offsets.append(offset + text)
        text += len(e[0])
    return {"tokens": [e[0] for e in entries], "text_offset": offsets,
            "token_logprobs": [e[1] for e in entries], "top_logprobs": [e[2] for e in entries]}


def _streamed(chunks: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    for c in chunks:
        c.pop("usage", None)
        yield c


def _collect(chunks: Iterator[Dict[str, Any]]) -> Dict[str, Any]:
    """One text_completion from the chunks of a completion."""
    text, lps, last = [], [], None
    for c in chunks:
        ch = c["choices"][0]
        text.append(ch["text"])
        if ch["logprobs"]:
            lps.append(ch["logprobs"])
        last = c
    assert last is not None
    merged = None
    if lps:
        merged = {k: [v for lp in lps for v in lp[k]] for k in ("tokens", "text_offset", "token_logprobs",
                                                                 "top_logprobs")}
    last["choices"][0].update(text="".join(text), logprobs=merged)
    return last


def _chat_logprobs(lp: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if lp is None:
        return None
    content = []
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        content.append({"token": token, "bytes": None, "logprob": logprob,
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in (top or {}).items()]})
    return {"content": content, "refusal": None}


def _chat_response(c: Dict[str, Any]) -> Dict[str, Any]:
    ch = c["choices"][0]
    return {"id": "chat" + c["id"], "object": "chat.completion", "created": c["created"], "model": c["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ch["text"]},
                         "logprobs": _chat_logprobs(ch["logprobs"]), "finish_reason": ch["finish_reason"]}],
            "usage": c["usage"]}


def _chat_chunks(chunks: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    for i, c in enumerate(chunks):
        base = {"id": "chat" + c["id"], "model": c["model"], "created": c["created"],
                "object": "chat.completion.chunk"}
        if i == 0:
            yield dict(base, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                       "finish_reason": None}])
        ch = c["choices"][0]
        delta = {"content": ch["text"]} if ch["finish_reason"] is None else {}
        yield dict(base, choices=[{"index": 0, "delta": delta, "logprobs": _chat_logprobs(ch["logprobs"]),
                                   "finish_reason": ch["finish_reason"]}])
