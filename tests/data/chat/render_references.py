#!/usr/bin/env python3
"""Reference renderings of the chat templates Kiln recognizes, made with Jinja2 (as transformers'
apply_chat_template does) from the templates the models publish in tokenizer_config.json.

    cd tests/data/chat && python3 render_references.py

Writes NAME.jinja (the template text, for recognition) and NAME.txt (the rendering of a fixed
conversation with add_generation_prompt=True). bos_token is rendered empty: Kiln's tokenizer adds BOS.
"""
import jinja2

TEMPLATES = {
    # Qwen2-Instruct's ChatML template without its default system prompt (the generic ChatML form).
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
              "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
              "{% endif %}",
    # Meta-Llama-3-8B-Instruct.
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
              "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
              "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
              "<|end_header_id|>\\n\\n' }}{% endif %}",
    # Phi-3.5-mini-instruct.
    "phi3": "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
            "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
            "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
            "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
    # Mistral-7B-Instruct-v0.2 (user/assistant only).
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
               "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
               "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
               "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! Who are you?"},
    {"role": "assistant", "content": "A model.\nNothing more."},
    {"role": "user", "content": "Count: 1, 2, 3"},
]

for name, text in TEMPLATES.items():
    messages = CONVERSATION[1:] if name == "mistral" else CONVERSATION
    out = jinja2.Environment().from_string(text).render(
        messages=messages, add_generation_prompt=True, bos_token="", eos_token="</s>",
        raise_exception=lambda m: (_ for _ in ()).throw(Exception(m)))
    open(name + ".jinja", "w").write(text)
    open(name + ".txt", "w").write(out)
