"""
The official `openai` Python client drives `kiln serve` as it drives OpenAI's service: completions and chat
completions, streamed and not, with n, stop, logprobs, seed and usage (stream_options.include_usage), and
it raises the typed errors it expects for bad requests, a missing or wrong API key and unknown paths.
Greedy (temperature 0) answers are the reference: a streamed answer concatenates to the plain one.
"""
import openai
import pytest
import requests

PROMPT = "Once upon a time"


def complete(client, model_id, **kw):
    args = dict(model=model_id, prompt=PROMPT, max_tokens=24, temperature=0)
    args.update(kw)
    return client.completions.create(**args)


def chat(client, model_id, **kw):
    args = dict(model=model_id, max_tokens=24, temperature=0,
                messages=[{"role": "system", "content": "You tell short stories."},
                          {"role": "user", "content": "Tell me about a cat."}])
    args.update(kw)
    return client.chat.completions.create(**args)


def test_models_lists_the_loaded_model(client):
    models = client.models.list().data
    assert len(models) == 1
    assert models[0].id and models[0].object == "model"


def test_completion_returns_text_finish_reason_and_usage(client, model_id):
    r = complete(client, model_id, max_tokens=16)
    assert r.object == "text_completion"
    assert r.id and r.created > 0 and r.model
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and isinstance(c.text, str) and c.text
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens >= 5  # BOS + "Once upon a time"
    assert r.usage.completion_tokens == 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streamed_completion_concatenates_to_the_plain_one(client, model_id):
    plain = complete(client, model_id).choices[0].text
    chunks = list(complete(client, model_id, stream=True))
    assert all(ch.object == "text_completion" for ch in chunks)
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == plain
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["length"]
    assert all(ch.usage is None for ch in chunks), "usage is sent only when include_usage asks for it"


def test_stream_options_include_usage_adds_a_final_usage_chunk(client, model_id):
    chunks = list(complete(client, model_id, max_tokens=10, stream=True,
                           stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 10
    assert last.usage.total_tokens == last.usage.prompt_tokens + 10
    assert all(ch.usage is None for ch in chunks[:-1])


def test_chat_completion_answers_as_assistant(client, model_id):
    r = chat(client, model_id)
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and isinstance(m.content, str) and m.content
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 24


def test_streamed_chat_starts_with_the_role_and_concatenates_to_the_plain_answer(client, model_id):
    plain = chat(client, model_id).choices[0].message.content
    chunks = list(chat(client, model_id, stream=True, stream_options={"include_usage": True}))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == plain
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_n_choices_at_temperature_zero_are_identical(client, model_id):
    r = complete(client, model_id, n=3, max_tokens=12)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert len({c.text for c in r.choices}) == 1
    assert r.usage.completion_tokens == 36


def test_n_choices_stream_each_to_its_own_finish(client, model_id):
    chunks = list(complete(client, model_id, n=2, max_tokens=8, temperature=1.0, seed=7, stream=True))
    texts, finishes = {0: "", 1: ""}, {}
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert finishes == {0: "length", 1: "length"}
    assert texts[0] and texts[1]


def test_same_seed_samples_the_same_text(client, model_id):
    a = complete(client, model_id, temperature=0.9, seed=1234, max_tokens=20).choices[0].text
    b = complete(client, model_id, temperature=0.9, seed=1234, max_tokens=20).choices[0].text
    assert a == b


def test_stop_string_ends_the_text_before_it_plainly_and_streamed(client, model_id):
    full = complete(client, model_id, max_tokens=40).choices[0].text
    words = full.split()
    assert len(words) > 4, full
    stop = " " + words[3]
    expected = full[:full.index(stop)]
    r = complete(client, model_id, max_tokens=40, stop=[stop, "never appears"])
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    streamed = list(complete(client, model_id, max_tokens=40, stop=stop, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == expected
    assert [ch.choices[0].finish_reason for ch in streamed if ch.choices][-1] == "stop"


def test_completion_logprobs_name_each_token_and_its_alternatives(client, model_id):
    r = complete(client, model_id, max_tokens=8, logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == c.text
    for chosen, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0
        assert 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert logprob == pytest.approx(max(top.values()), abs=1e-4)
        assert chosen in top


def test_chat_logprobs_list_top_alternatives_per_token(client, model_id):
    r = chat(client, model_id, max_tokens=6, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob, abs=1e-4)


@pytest.mark.parametrize("kw, param", [
    (dict(max_tokens=-1), "max_tokens"),
    (dict(max_tokens=10 ** 9), "max_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature="hot"), "temperature"),
    (dict(top_p=1.5), "top_p"),
    (dict(n=0), "n"),
    (dict(logprobs=21), "logprobs"),
    (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
    (dict(presence_penalty=3.0), "presence_penalty"),
])
def test_bad_completion_parameters_raise_bad_request_naming_the_field(client, model_id, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, model_id, **kw)
    assert e.value.status_code == 400
    assert param in e.value.message
    assert e.value.type == "invalid_request_error"


def test_prompt_longer_than_the_context_is_a_bad_request(client, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, model_id, prompt="once upon a time " * 4000, max_tokens=8)
    assert e.value.status_code == 400


def test_chat_with_an_unknown_role_is_a_bad_request(client, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "wizard", "content": "hi"}])
    assert "role" in e.value.message


def test_chat_without_messages_is_a_bad_request(client, model_id):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_id, messages=[])


def test_unknown_path_raises_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.get("/no/such/endpoint", cast_to=object)
    assert e.value.status_code == 404


def test_api_key_is_required_when_the_server_has_one(start_server):
    s = start_server("api-key", args=["--api-key", "sekrit"])
    good = openai.OpenAI(base_url=s.v1, api_key="sekrit", timeout=30, max_retries=0)
    model = good.models.list().data[0].id
    assert good.completions.create(model=model, prompt=PROMPT, max_tokens=2).choices[0].text
    for key in ("wrong", "sekrit-but-longer"):
        bad = openai.OpenAI(base_url=s.v1, api_key=key, timeout=30, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.completions.create(model=model, prompt=PROMPT, max_tokens=2)
        assert e.value.status_code == 401
    r = requests.post(s.v1 + "/completions", json={"prompt": PROMPT, "max_tokens": 2}, timeout=30)
    assert r.status_code == 401 and "error" in r.json()
    # Health checks (load balancers, systemd) need no key.
    assert requests.get(s.base + "/health", timeout=10).status_code == 200
