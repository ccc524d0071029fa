"""The generation loop behind kiln.Llama's completions: sampling token by token, stop strings held back
while they may still be forming, logprobs, and the OpenAI-style response dicts of llama-cpp-python.

A completion is a generator of events that both the streaming and the plain API consume:
    ("text", bytes, entries)   new text safe to hand out, with the logprob entries of its tokens
    ("done", finish_reason)    the end: "stop" (EOS, end of turn, a stop string, or a grammar that allows
                               nothing more) or "length"
Text is handed out only up to the last point where no stop string can begin, and only at UTF-8
character boundaries, so every chunk decodes on its own and no chunk ever shows part of a stop string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .model import Batch, Context, Model
from .sampler import Sampler
from .tokenizer import Detokenizer

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


@dataclass
class Sampling:
    """What one completion asks of the sampler (llama-cpp-python's argument names)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int = 0
    logit_bias: Optional[Dict[int, float]] = None
    logits_processor: Optional[Sequence[LogitsProcessor]] = None
    stopping_criteria: Optional[Sequence[StoppingCriteria]] = None


@dataclass
class Request:
    """One completion: the prompt's tokens and how to end."""

    prompt_tokens: List[int]
    max_tokens: int
    stop: List[bytes]
    stop_tokens: List[int]
    strip_leading_space: bool
    logprobs: Optional[int]  # top-N alternatives per token, or None
    sampling: Sampling = field(default_factory=Sampling)
    grammar: Any = None  # a kiln.grammar.GrammarMatcher constraining the tokens, or None
    draft_model: Any = None  # a kiln.llama_speculative.LlamaDraftModel guessing tokens, or None
    n_batch: int = 512  # the context's most tokens per batch (a step decodes 1 + guesses)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log(softmax(logits)) in float32, with -inf and NaN logits giving -inf."""
    x = np.asarray(logits, dtype=np.float32)
    x = np.where(np.isnan(x), -np.inf, x)
    m = np.max(x)
    if not np.isfinite(m):
        m = np.float32(0)
    shifted = x - m
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.sum(np.exp(shifted)))


def logprob_entry(model: Model, token: int, logits: np.ndarray, top_n: int) -> Tuple[str, float, Dict[str, float]]:
    """(token text, its logprob, {text: logprob} of the top_n tokens and the token itself)."""
    lp = log_softmax(logits)
    text = model.detokenize([token]).decode("utf-8", "ignore")
    top: Dict[str, float] = {}
    if top_n > 0:
        best = np.argpartition(-lp, min(top_n, lp.shape[0] - 1))[:top_n]
        for t in best[np.argsort(-lp[best], kind="stable")]:
            top[model.detokenize([int(t)]).decode("utf-8", "ignore")] = float(lp[t])
    top[text] = float(lp[token])
    return text, float(lp[token]), top


def _held_back(text: bytes, stops: Sequence[bytes]) -> int:
    """How many trailing bytes of text could be the start of a stop string."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return hold


def _char_boundary(text: bytes, cut: int, floor: int) -> int:
    """cut moved back to the start of a UTF-8 character (not below floor)."""
    while cut > floor and cut < len(text) and (text[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut


class _Penalties:
    """llama-cpp-python's frequency and presence penalties and logit bias, applied in Python to a copy
    of the logits (Kiln's sampler has the repeat penalty only)."""

    def __init__(self, s: Sampling, n_vocab: int) -> None:
        self.s = s
        self.active = bool(s.frequency_penalty or s.presence_penalty or s.logit_bias or s.logits_processor)
        self.bias = np.zeros(n_vocab, dtype=np.float32)
        for t, b in (s.logit_bias or {}).items():
            self.bias[int(t)] += float(b)

    def apply(self, logits: np.ndarray, history: List[int]) -> np.ndarray:
        if not self.active:
            return logits
        out = np.array(logits, dtype=np.float32) + self.bias
        if self.s.frequency_penalty or self.s.presence_penalty:
            last = history[-self.s.repeat_last_n :] if self.s.repeat_last_n > 0 else []
            if last:
                ids, counts = np.unique(np.asarray(last, dtype=np.int64), return_counts=True)
                out[ids] -= counts * self.s.frequency_penalty + self.s.presence_penalty
        if self.s.logits_processor:
            ids_arr = np.asarray(history, dtype=np.intc)
            for proc in self.s.logits_processor:
                out = np.asarray(proc(ids_arr, out), dtype=np.float32)
        return out


class _Rows:
    """The logits rows still to sample from, each with the guessed token it should confirm (or None):
    one row after a plain step; 1 + k after a step that decoded k guesses (speculative decoding)."""

    def __init__(self, first_logits: np.ndarray) -> None:
        self.rows: List[Tuple[np.ndarray, Optional[int]]] = [(first_logits, None)]

    def step(self, ctx: Context, batch: Optional[Batch], token: int, pos: int, guesses: np.ndarray) -> None:
        """Decode token at pos, and the guesses after it in the same batch when there are any."""
        if batch is None or len(guesses) == 0:
            self.rows = [(ctx.decode([token]), None)]
            return
        batch.clear()
        batch.add(token, pos, 0, True)
        for j, g in enumerate(guesses):
            batch.add(int(g), pos + 1 + j, 0, True)
        ctx.decode_batch(batch)
        self.rows = [(ctx.logits(j), int(guesses[j]) if j < len(guesses) else None) for j in range(len(guesses) + 1)]


def generate(
    model: Model,
    ctx: Context,
    first_logits: np.ndarray,
    req: Request,
    completion_tokens: List[int],
) -> Iterator[Tuple[Any, ...]]:
    """Sample up to req.max_tokens tokens after a prompt already in ctx (first_logits are its last
    token's), appending each kept token to completion_tokens, and yield the events of the module doc."""
    s = req.sampling
    sampler = Sampler(
        model.n_vocab, s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n, s.seed
    )
    detok = Detokenizer(model, req.strip_leading_space)
    penalties = _Penalties(s, model.n_vocab)
    history = list(req.prompt_tokens)
    spec_batch = Batch(req.n_batch) if req.draft_model is not None else None
    rows = _Rows(first_logits)
    for t in req.prompt_tokens:
        sampler.accept(t)
    if req.grammar is not None:
        sampler.set_grammar(req.grammar)
    text, sent = b"", 0
    pending: List[Tuple[int, Tuple[str, float, Dict[str, float]]]] = []  # (text offset, entry)
    finish, stopped = "length", False
    try:
        while len(completion_tokens) < req.max_tokens:
            logits, guess = rows.rows.pop(0)
            scores = penalties.apply(logits, history)
            token = sampler.sample(scores) if guess is None else sampler.sample_draft(scores, guess)
            if guess is not None and token != guess:
                ctx.kv_seq_rm(0, len(history), -1)  # this guess and the later ones saw a wrong prefix
                rows.rows = []
            if token in req.stop_tokens:
                finish = "stop"
                break
            sampler.accept(token)
            completion_tokens.append(token)
            history.append(token)
            if req.logprobs is not None:
                pending.append((len(text), logprob_entry(model, token, scores, req.logprobs)))
            text += detok.push(token)
            grammar_done = req.grammar is not None and req.grammar.is_done
            last = len(completion_tokens) >= req.max_tokens or grammar_done
            if last:
                text += detok.flush()
            found = [i for i in (text.find(st, sent) for st in req.stop) if i >= 0]
            criteria = s.stopping_criteria and any(
                c(np.asarray(history, dtype=np.intc), scores) for c in s.stopping_criteria
            )
            if found or criteria:
                cut = min(found) if found else len(text)
                yield ("text", text[sent:cut], [e for off, e in pending if off < cut])
                finish, stopped = "stop", True
                break
            cut = _char_boundary(text, len(text) - _held_back(text, req.stop), sent)
            if cut > sent:
                yield ("text", text[sent:cut], [e for off, e in pending if off < cut])
                pending = [(off, e) for off, e in pending if off >= cut]
                sent = cut
            if last:
                finish = "stop" if grammar_done else finish
                break
            if not rows.rows:
                left = min(req.max_tokens - len(completion_tokens) - 1, req.n_batch - 1, ctx.n_ctx - len(history))
                guesses = req.draft_model(np.asarray(history, dtype=np.intc))[: max(0, left)] if spec_batch is not None else []
                rows.step(ctx, spec_batch, token, len(history) - 1, guesses)
        if not stopped:
            # What was held back never became a stop string: it is part of the answer.
            text += detok.flush()
            if len(text) > sent or pending:
                yield ("text", text[sent:], [e for _, e in pending])
    finally:
        if spec_batch is not None:
            if ctx.n_past > len(history):
                ctx.kv_seq_rm(0, len(history), -1)  # guesses never verified
            spec_batch.close()
        detok.close()
        sampler.close()
    yield ("done", finish)
