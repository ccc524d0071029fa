#!/usr/bin/env python3
"""Reference renderings of a tool-calling conversation by Qwen2.5-Instruct's chat template (the Hermes
<tool_call> form), made with Jinja2 as transformers' apply_chat_template does (its tojson is json.dumps
with ensure_ascii=False, keys in their order).

    cd tests/data/tools && python3 render_references.py

Writes qwen2.5.jinja (the template text, which `kiln synth --chat-template` embeds in the test model of
tests/server/test_tools.py), conversation.json (the OpenAI request: messages and tools, with each tool
call's arguments as the JSON string OpenAI sends) and qwen2.5.txt (the rendering, with the generation
prompt). Kiln has no default system prompt, so the conversation starts with a system message.
"""
import json

import jinja2

QWEN25 = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 32}},
                       "required": ["zone"]}}},
]
ARGS = [{"city": "Paris", "unit": "celsius"}, {"zone": "Europe/Paris"}]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather and time in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS[0]}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ARGS[1]}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
    {"role": "assistant", "content": "18 degrees, 14:05."},
    {"role": "user", "content": "And tomorrow?"},
]

env = jinja2.Environment()
env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
out = env.from_string(QWEN25).render(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True)
request = json.loads(json.dumps({"messages": MESSAGES, "tools": TOOLS}))
for m in request["messages"]:
    for call in m.get("tool_calls") or []:
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
open("qwen2.5.jinja", "w").write(QWEN25)
open("qwen2.5.txt", "w").write(out)
open("conversation.json", "w").write(json.dumps(request, indent=1) + "\n")
