#!/usr/bin/env python3
"""Generate data/fixtures/chat/: reference chat renderings for src/formats/chat.c and jinja.c.

ratiocheck renders {"messages": [...]} prompt lines with the model's chat template, run by its
own Jinja subset interpreter (src/formats/jinja_*.c). The references here come from transformers'
own ``apply_chat_template`` (jinja2):

    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    ids  = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                   return_dict=False, **kwargs)

(the ids are the text tokenized with add_special_tokens=False; the script checks that
``tok(text, add_special_tokens=False).input_ids == ids``). A conversation the template refuses
(raise_exception) is recorded with transformers' error message. strftime_now() is frozen at
FROZEN_NOW (the C test fixes the same time).

Pinned versions (tools/requirements-chat-fixtures.txt; the script refuses others unless
--any-version): python 3.11.7, transformers 5.24.0, tokenizers 0.23.3, jinja2 3.1.6,
huggingface-hub 2.4.0. CPU only, no network, deterministic (``--check`` regenerates into a
temporary folder and compares byte for byte).

Tokenizer folders written (tokenizers from data/fixtures/tokenizers/, re-saved with the
``tokenizers`` library after ``add_special_tokens`` of the tokens the templates write; no
hub access is needed or used):

    qwen2/     qwen2_split + <|im_start|>, <|im_end|>; Qwen2-Instruct's template
    qwen2_5/   the same tokenizer; Qwen2.5-Instruct's template in chat_template.jinja
    qwen3/     the same tokenizer + <think>, </think>; Qwen3's template in chat_template.jinja
    llama3/    llama3_split + <|begin_of_text|>, <|start_header_id|>, <|end_header_id|>,
               <|eot_id|>; Meta-Llama-3-8B-Instruct's template
    mistral/   mistral_metaspace's tokenizer; Mistral-7B-Instruct-v0.1's [INST] template
    gemma2/    mistral_metaspace + <bos>, <eos>, <start_of_turn>, <end_of_turn>; gemma-2-2b-it's
    phi3/      mistral_metaspace + <|system|>, <|user|>, <|assistant|>, <|end|>, <|endoftext|>;
               Phi-3.5-mini-instruct's template

The published templates are data: those quoted in this script (Qwen2, Qwen2.5, Meta-Llama-3,
Mistral-7B-Instruct-v0.1) and the files of data/fixtures/chat/templates/, copied from the
models/templates/ folder of a llama.cpp repository (PUBLISHED below: repository, path, commit
and SHA-256; the script checks the SHA-256), or from the "gguf" field of Ollama library entries
in huggingface.js (OLLAMA below: Gemma 3, OLMo 2, Phi-4, Phi-4-mini, Phi-3-mini, GLM-4-9B-chat). The other templates are written here: variants
of the published ones (whitespace control, quoting, ...). Templates without a folder of their
own are stored in chat_refs.json only (``"tokenizer_from"`` names the folder whose
tokenizer.json they use; the C test writes a temporary folder).

Templates with a construct outside ratiocheck's subset (macros, some filters) are recorded as
``"expect": "refuse"`` with the construct the refusal must name, and how many conversations
transformers renders with them.

jinja_refs.json: small templates exercising one construct each (CONSTRUCTS), rendered by
transformers' compiled template (the environment apply_chat_template uses) with JINJA_VARS;
the C test runs src/formats/jinja_*.c on each. Those marked "c_refuses" are ones transformers
renders and ratiocheck refuses by design (docs/chat-templates.md).

SmolLM2: the real model folder made by ``python3 tools/get_real_model.py``
(~/.cache/ratiocheck/smollm2/SmolLM2-135M-Instruct, or --smollm2 DIR) is read in place and
only its references are stored (template "smollm2", with the SHA-256 of the folder's
tokenizer.json and tokenizer_config.json). The conversations contain no digits, so the
two pre-tokenizers get_real_model.py can write give the same ids.

Usage:
    pip install -r tools/requirements-chat-fixtures.txt
    python3 tools/get_real_model.py                 # the SmolLM2 folder, if not there
    python3 tools/make_chat_fixtures.py             # rewrites data/fixtures/chat/
    python3 tools/make_chat_fixtures.py --check     # regenerate in a temp dir and compare
"""

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import datetime  # noqa: E402

import huggingface_hub  # noqa: E402
import jinja2  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
import transformers.utils.chat_template_utils as chat_template_utils  # noqa: E402
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

# strftime_now() formats datetime.now() (transformers' chat_template_utils); frozen here, as the C
# test fixes the same time (rc_chat_set_time)
FROZEN_NOW = datetime.datetime(2024, 7, 26, 9, 30, 0)


class _FrozenDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN_NOW


chat_template_utils.datetime = _FrozenDatetime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "data", "fixtures", "chat")
TOKENIZER_FIXTURES = os.path.join(REPO, "data", "fixtures", "tokenizers")
DEFAULT_SMOLLM2 = os.path.join(os.path.expanduser("~"), ".cache", "ratiocheck", "smollm2",
                               "SmolLM2-135M-Instruct")

PINNED = {
    "python": "3.11.7",
    "transformers": "5.24.0",
    "tokenizers": "0.23.3",
    "jinja2": "3.1.6",
    "huggingface-hub": "2.4.0",
}

# ---------------------------------------------------------------------------- published templates

# Qwen/Qwen2-7B-Instruct tokenizer_config.json "chat_template" (the newlines inside the
# string literals are real newline characters in the published value).
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen/Qwen2.5-0.5B-Instruct tokenizer_config.json "chat_template" (the same for the other
# Qwen2.5-Instruct sizes): real newlines between the tags, "\n" escapes inside the literals,
# one newline at the end.
QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json "chat_template" ("\n" escapes
# inside the literals).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# mistralai/Mistral-7B-Instruct-v0.1 tokenizer_config.json "chat_template".
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and "
    "assistant roles are supported!') }}{% endif %}{% endfor %}"
)

# ---------------------------------------------------------------------------- variants (written here)

# ChatML with a default system message, written differently from SmolLM2's / Qwen2's:
# double quotes, attribute access, the system literal split with +, whitespace control
# everywhere, indentation.
CHATML_REFORMATTED = """{%- for message in messages -%}
    {%- if loop.first and messages[0].role != "system" -%}
        {{- "<|im_start|>system\\n" + "A default system message, with 'quotes', \\"double quotes\\" and \u00fcn\u00efc\u00f6d\u00e9." + "<|im_end|>\\n" -}}
    {%- endif -%}
    {{- "<|im_start|>" + message.role + "\\n" + message.content + "<|im_end|>" + "\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
{%- endif -%}
"""

# The same relying on trim_blocks / lstrip_blocks (block tags on their own indented lines)
# and `loop.first and message['role'] != 'system'` (message is messages[0] on the first turn).
CHATML_BLOCKS = """{% for message in messages %}
  {% if loop.first and message['role'] != 'system' %}
    {{- '<|im_start|>system\\nYou are a test model.<|im_end|>\\n' -}}
  {% endif %}
  {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}
{% endfor %}
{% if add_generation_prompt %}
  {{- '<|im_start|>assistant\\n' -}}
{% endif %}
"""

# Plain ChatML: no default system message.
CHATML_NOSYSTEM = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

# Llama-3 written without set: BOS once, then the turns.
LLAMA3_SIMPLE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# Near misses that must be refused (transformers renders them differently from the
# family's layout):
# the output tag on its own line without "-": Jinja keeps the newline before {% endif %}
CHATML_EXTRA_NEWLINE = """{% for message in messages %}
{% if loop.first and messages[0]['role'] != 'system' %}
{{ '<|im_start|>system\\nYou are a test model.<|im_end|>\\n' }}
{% endif %}
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{% endfor %}
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""

# ChatML that trims the content
CHATML_TRIM = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] | trim"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

# the default system message before every non-system turn (no loop.first)
CHATML_SYSTEM_EVERY_TURN = (
    "{% for message in messages %}{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Gemma-style turns
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
    "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

# The opening of a Llama-3.1-style template: a dated system message
LLAMA31_LIKE = (
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim"
    " + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"
)

# ---------------------------------------------------------------------------- conversations

# No digits anywhere (see the docstring). Roles: system, user, assistant.
CONVERSATIONS = [
    ("user_only", [("user", "Hello! How are you today?")]),
    ("system_user", [("system", "You are a terse assistant."), ("user", "Name a colour.")]),
    ("multi_turn", [("user", "What is the capital of France?"), ("assistant", "Paris."),
                    ("user", "And of Italy?")]),
    ("system_multi_turn", [("system", "Answer in one word."), ("user", "Sky colour?"),
                           ("assistant", "Blue."), ("user", "Grass colour?")]),
    ("newlines", [("user", "line one\nline two\n\nline four\n")]),
    ("unicode", [("user", "Gr\u00fc\u00dfe, \u4e16\u754c! \U0001f44b\U0001f3fd caf\u00e9 \u2014 na\u00efve "
                          "\u03a9\u03bc\u03ad\u03b3\u03b1 \u05e9\u05dc\u05d5\u05dd")]),
    ("spaces", [("system", "  padded system  "), ("user", "   leading and trailing spaces \t\n"),
                ("assistant", "\n\nreply\n"), ("user", " x ")]),
    ("unicode_spaces", [("user", "\u3000ideographic space\u00a0nbsp\u2003em space\u2028"
                                 "line separator\u0085\x1f")]),
    ("special_tokens_in_text", [("user", "Say <|im_start|>user and <|im_end|> or <|eot_id|>, "
                                         "<|start_header_id|>x<|end_header_id|>, <|begin_of_text|> "
                                         "and <|endoftext|>.")]),
    ("system_later", [("user", "hi"), ("system", "A late system message."), ("user", "again")]),
    ("only_system", [("system", "Only a system message.")]),
    ("empty_content", [("user", ""), ("assistant", ""), ("user", "empty turns before this")]),
    ("whitespace_only", [("user", "   \n\t ")]),
    ("assistant_first", [("assistant", "I start."), ("user", "ok")]),
    ("long_turn", [("user", "The quick brown fox jumps over the lazy dog. " * 12)]),
]

# The Qwen3 thinking path: an assistant turn whose content carries <think>...</think>, and one
# with reasoning_content (transformers aliases it as "thinking" too). Kept apart from
# CONVERSATIONS (the real-model suite counts those).
REASONING_CONVERSATIONS = [
    ("think_in_content", [("user", "Name a fruit."),
                          ("assistant", "<think>\nAn apple is a fruit.\n</think>\n\nAn apple."),
                          ("user", "Another one?")]),
    ("think_last", [("user", "Name a fruit."), ("assistant", "<think>\nThinking here.\n</think>\n\nA pear.")]),
    ("reasoning_field", [("user", "Name a colour."),
                         ("assistant", "Green.", "The user wants one colour."),
                         ("user", "And another?")]),
]

# Extra keyword arguments of apply_chat_template, for the templates that read them
KWARGS_VARIANTS = [{"enable_thinking": False}, {"enable_thinking": True}]

# ---------------------------------------------------------------------------- the template list

FOLDERS = {
    # name: (source tokenizer fixture, tokens to make sure are special, template, file, config extras)
    "qwen2": ("qwen2_split", ["<|im_start|>", "<|im_end|>"], QWEN2_TEMPLATE, "tokenizer_config.json",
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen2_5": ("qwen2_split", ["<|im_start|>", "<|im_end|>"], QWEN25_TEMPLATE, "chat_template.jinja",
                {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen3": ("qwen2_split", ["<|im_start|>", "<|im_end|>", "<think>", "</think>"], "published:qwen3",
              "chat_template.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "llama3": ("llama3_split", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               LLAMA3_TEMPLATE, "tokenizer_config.json",
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "mistral": ("mistral_metaspace", [], MISTRAL_TEMPLATE, "tokenizer_config.json",
                {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "gemma2": ("mistral_metaspace", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "published:gemma2",
               "tokenizer_config.json", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    "phi3": ("mistral_metaspace", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
             "published:phi3_5", "tokenizer_config.json", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
}

# Published templates stored in data/fixtures/chat/templates/: copied from llama.cpp's
# models/templates/ (its README: fetched from the model's hub repository with
# scripts/get_chat_template.py) as vendored by this repository and commit.
LLAMA_CPP = ("Raudbjorn/ggml-llama.cpp", "ae1a0b1c71a8b3a86ede8cb5892ed9ce967d00b2")
PUBLISHED = {
    # name: (file, model, sha256)
    "llama3_1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama/Llama-3.1-8B-Instruct",
                 "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65"),
    "llama3_2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "meta-llama/Llama-3.2-3B-Instruct",
                 "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4"),
    "llama3_3": ("meta-llama-Llama-3.3-70B-Instruct.jinja", "meta-llama/Llama-3.3-70B-Instruct",
                 "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "Qwen/Qwen3-0.6B",
              "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"),
    "qwq": ("Qwen-QwQ-32B.jinja", "Qwen/QwQ-32B",
            "5ed15374ce53e19a7798710736a2c9fe41c79f7385e8421a2080d6575a80ef1b"),
    "deepseek_r1_distill_qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
                                 "bbe594884b44d740667ee65a70bc8d333a565eab3d63ea59f291ea73ada84ba6"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", "HuggingFaceTB/SmolLM3-3B",
                "19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97"),
    "gemma2": ("google-gemma-2-2b-it.jinja", "google/gemma-2-2b-it",
               "ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6"),
    "phi3_5": ("microsoft-Phi-3.5-mini-instruct.jinja", "microsoft/Phi-3.5-mini-instruct",
               "78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90"),
    "mistral_nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistralai/Mistral-Nemo-Instruct-2407",
                     "e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272"),
    "mistral_small_3_2": ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
                          "5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608"),
    "granite3_3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", "ibm-granite/granite-3.3-2b-instruct",
                   "3c71df5f659987462c882bf9e295b597dc19902467a7312ea382c5896681bc02"),
    "glm4_6": ("GLM-4.6.jinja", "zai-org/GLM-4.6",
               "8804f445c761b9f259e3c1126a579d481a22ca09b2a3d32bcc4eb91bc36e0301"),
    "qwen3_5": ("Qwen3.5-4B.jinja", "Qwen/Qwen3.5-4B",
                "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
    "gemma4": ("google-gemma-4-31B-it.jinja", "google/gemma-4-31B-it",
               "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98"),
    "gpt_oss": ("openai-gpt-oss-120b.jinja", "openai/gpt-oss-120b",
                "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146"),
    "deepseek_v3_2": ("deepseek-ai-DeepSeek-V3.2.jinja", "deepseek-ai/DeepSeek-V3.2",
                      "8e5a13fcc4bdd4d943311fc59064b805770fdeddfccbd7f1c252cc16e8acaf3d"),
    "seed_oss": ("ByteDance-Seed-OSS.jinja", "ByteDance-Seed/Seed-OSS-36B-Instruct",
                 "3f9e0dc4adeb8032287d0129dc75b6298fee8698a52ab41e863dbc89929330d3"),
    "ministral3": ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistralai/Ministral-3-14B-Reasoning-2512",
                   "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda"),
}
# Published templates stored in data/fixtures/chat/templates/ as the "gguf" field (the GGUF's
# tokenizer.chat_template, which the conversion copies from the model's tokenizer_config.json) of
# an Ollama library entry of huggingface.js' packages/ollama-utils/src/chat-template-automap.ts.
HF_JS = ("huggingface/huggingface.js", "fe42e68017ffc76d09922ea8f9b38a6964345710",
         "packages/ollama-utils/src/chat-template-automap.ts")
OLLAMA = {
    # name: (file, model, Ollama library entry, sha256)
    "gemma3": ("ollama-gemma3.jinja", "google/gemma-3-270m-it", "library/gemma3:270m",
               "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4"),
    "glm4": ("ollama-glm4.jinja", "THUDM/glm-4-9b-chat", "library/glm4:9b",
             "27288f957f8364c990a2ce13bf5f8bf86921c4bce467ce698c76dcc69466d821"),
    "olmo2": ("ollama-olmo2.jinja", "allenai/OLMo-2-1124-7B-Instruct", "library/olmo2:7b",
              "fe689ffbd6a4e2d0532d7480696b065b10e0e1eff3f9b9fc4bea415761e4bf4a"),
    "phi4": ("ollama-phi4.jinja", "microsoft/phi-4", "library/phi4:14b",
             "a41fb8727c4f1e722e53cb1ea935038a1177b8bdf09387f3b048f9da5255ef3e"),
    "phi4_mini": ("ollama-phi4_mini.jinja", "microsoft/Phi-4-mini-instruct", "library/phi4-mini:3.8b",
                  "febf589225c9728ab791f52e8897d7607a823d45368f0a4c92fa68997b40cce9"),
    "phi3_mini": ("ollama-phi3_mini.jinja", "microsoft/Phi-3-mini-4k-instruct", "library/phi3:3.8b",
                  "dcaee66df77bfbb789ec541fe713218da30225a526f1db97138fc39ee6dc56aa"),
}
TEMPLATES_DIR = os.path.join(REPO, "data", "fixtures", "chat", "templates")


def published(name):
    f, _, want = PUBLISHED[name] if name in PUBLISHED else (OLLAMA[name][0], None, OLLAMA[name][3])
    with open(os.path.join(TEMPLATES_DIR, f), "rb") as fh:
        raw = fh.read()
    got = hashlib.sha256(raw).hexdigest()
    assert not want or got == want, f"{f}: SHA-256 {got}, expected {want}"
    return raw.decode("utf-8")


def pub(name, tokenizer, template_file="chat_template.jinja", expect="render", construct=None, folder=False):
    f, model, _ = PUBLISHED[name]
    d = dict(name=name, source=f"{model}'s chat template, as {LLAMA_CPP[0]} models/templates/{f} "
             f"(commit {LLAMA_CPP[1][:12]}) vendors it", tokenizer=tokenizer,
             template=None if folder else published(name), template_file=template_file, expect=expect,
             published={"model": model, "repository": LLAMA_CPP[0], "path": f"models/templates/{f}",
                        "commit": LLAMA_CPP[1]})
    if construct:
        d["construct"] = construct
    return d


def ollama(name, tokenizer, template_file="chat_template.jinja"):
    f, model, entry, _ = OLLAMA[name]
    return dict(name=name, source=f"{model}'s chat template, as the GGUF of the Ollama library entry {entry} "
                f"holds it ({HF_JS[0]} {HF_JS[2]}, commit {HF_JS[1][:12]}, field \"gguf\")", tokenizer=tokenizer,
                template=published(name), template_file=template_file, expect="render",
                published={"model": model, "repository": HF_JS[0], "path": f"{HF_JS[2]} ({entry}, gguf)",
                           "commit": HF_JS[1]})


WRITTEN = "written by make_chat_fixtures.py"
TEMPLATES = [
    dict(name="smollm2", source="the real model folder (tools/get_real_model.py; the GGUF's chat template)",
         tokenizer="real:smollm2", template=None, template_file="tokenizer_config.json", expect="render"),
    dict(name="qwen2", source="Qwen/Qwen2-7B-Instruct tokenizer_config.json (published, quoted in this script)",
         tokenizer="qwen2", template=None, template_file="tokenizer_config.json", expect="render"),
    dict(name="qwen2_5", source="Qwen/Qwen2.5-0.5B-Instruct tokenizer_config.json (published, quoted in this "
         "script; the same text as Qwen/Qwen2.5-7B-Instruct's, " + LLAMA_CPP[0] +
         " models/templates/Qwen-Qwen2.5-7B-Instruct.jinja), saved as chat_template.jinja",
         tokenizer="qwen2_5", template=None, template_file="chat_template.jinja", expect="render"),
    dict(name="llama3", source="meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json (published, quoted in "
         "this script)", tokenizer="llama3", template=None, template_file="tokenizer_config.json", expect="render"),
    dict(name="mistral", source="mistralai/Mistral-7B-Instruct-v0.1 tokenizer_config.json (published, quoted in "
         "this script)", tokenizer="mistral", template=None, template_file="tokenizer_config.json", expect="render"),
    pub("qwen3", "qwen3", folder=True),
    pub("gemma2", "gemma2", "tokenizer_config.json", folder=True),
    pub("phi3_5", "phi3", "tokenizer_config.json", folder=True),
    pub("llama3_1", "llama3"),
    pub("llama3_2", "llama3"),
    pub("llama3_3", "llama3", "tokenizer_config.json"),
    pub("qwq", "qwen3"),
    pub("deepseek_r1_distill_qwen", "llama3"),
    pub("smollm3", "qwen3"),
    pub("mistral_nemo", "mistral", "tokenizer_config.json"),
    pub("mistral_small_3_2", "mistral"),
    pub("granite3_3", "qwen2"),
    ollama("gemma3", "gemma2", "tokenizer_config.json"),
    ollama("olmo2", "phi3"),
    ollama("phi4", "qwen2"),
    ollama("phi4_mini", "phi3"),
    ollama("phi3_mini", "phi3", "tokenizer_config.json"),
    ollama("glm4", "phi3"),
    dict(name="chatml_reformatted", source=WRITTEN, tokenizer="qwen2", template=CHATML_REFORMATTED,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="chatml_blocks", source=WRITTEN, tokenizer="qwen2", template=CHATML_BLOCKS,
         template_file="chat_template.jinja", expect="render"),
    dict(name="chatml_nosystem", source=WRITTEN, tokenizer="qwen2", template=CHATML_NOSYSTEM,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="llama3_simple", source=WRITTEN, tokenizer="llama3", template=LLAMA3_SIMPLE,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="chatml_extra_newline", source=WRITTEN, tokenizer="qwen2", template=CHATML_EXTRA_NEWLINE,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="chatml_trim", source=WRITTEN, tokenizer="qwen2", template=CHATML_TRIM,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="chatml_system_every_turn", source=WRITTEN, tokenizer="qwen2", template=CHATML_SYSTEM_EVERY_TURN,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="gemma_style", source=WRITTEN, tokenizer="llama3", template=GEMMA_TEMPLATE,
         template_file="tokenizer_config.json", expect="render"),
    dict(name="llama31_like", source=WRITTEN, tokenizer="llama3", template=LLAMA31_LIKE,
         template_file="tokenizer_config.json", expect="render"),
    # outside the subset: refused by name
    pub("glm4_6", "qwen3", expect="refuse", construct="unsupported Jinja construct 'macro'"),
    pub("qwen3_5", "qwen3", expect="refuse", construct="unsupported Jinja construct 'macro'"),
    pub("gemma4", "gemma2", expect="refuse", construct="unsupported Jinja construct 'macro'"),
    pub("gpt_oss", "qwen2", expect="refuse", construct="unsupported Jinja construct 'macro'"),
    pub("deepseek_v3_2", "qwen2", expect="refuse", construct="unsupported Jinja filter 'from_json'"),
    pub("seed_oss", "qwen2", expect="refuse", construct="unsupported Jinja filter 'dictsort'"),
    pub("ministral3", "mistral", expect="refuse", construct="unsupported Jinja filter 'sort'"),
]

# ---------------------------------------------------------------------------- one construct each

# Rendered by transformers' compiled template with JINJA_VARS. (template, "c_refuses"): transformers
# renders it, ratiocheck refuses it by design (a Python feature outside the subset).
JINJA_VARS = {
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there, friend"},
                 {"role": "assistant", "content": "Hi."}],
    "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>", "tools": None, "documents": None,
}
CONSTRUCTS = [
    # whitespace control and lexing
    "a\n{% if true %}\nb\n{% endif %}\nc\n",
    "  {% if true %}x{% endif %}  \n  {#- c -#}  y",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "a\n  {%+ if true %}b{% endif %}\n",
    "{% if true +%}\nx{% endif %}",
    "line\n    {# comment #}\nnext",
    "{{ 'a' }}\n{{ 'b' -}}\n  c",
    "x {{- ' y ' -}} z",
    "\t{% for i in range(2) %}\n\t{{ i }}\n\t{% endfor %}\n",
    "a\u3000{%- if true %}b{% endif %}",
    "{{ '\\u00e9\\x41\\101\\t|\\q|' }}",
    "{{ 'a' 'b' \"c\" }}",
    "{{ 1_000 }} {{ 1.5e3 }} {{ 2.0 }} {{ 1e-5 }} {{ 123456789012345678.0 }} {{ 0.1 }} {{ -0.0 }}",
    "{{ 1 }}{# a comment with {{ tags }} #}{{ 2 }}",
    "{{ {'a': {'b': 1}} }}{{ {'a': {'b': 1}}['a']['b'] }}",
    # arithmetic and types
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2.5 }} {{ true + 1 }}",
    "{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 3 * 'x' }} {{ [1, 2] + [3] }} {{ (1, 2) + (3,) }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ x }}",
    "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in x }}",
    "{{ x and 1 }} {{ 0 or 'y' }} {{ none or [] }} {{ not 0 }} {{ 1 if 0 }}|{{ 'a' if 1 else 'b' }}",
    "{{ [1, 'a', none, true, 1.5, (1,), {'k': 'v'}] }}",
    "{{ {'a': [1, {'b': \"it's\"}]} }} {{ \"q'\" }} {{ ['q\"'] }} {{ [\"both'\\\"\"] }}",
    "{{ ['\\n\\t\\x01\\u00ad'] }}",
    "{{ -x }}", "{{ x + 1 }}", "{{ x.y }}", "{{ x[0] }}", "{{ 1 / 0 }}", "{{ 'a' + 1 }}",
    "{{ none.x }}|{{ (none.x) is defined }}",
    "{{ 'abc'[1] }} {{ 'abc'[-1] }} {{ 'abc'[5] is defined }} {{ [1,2,3][1:] }} {{ 'h\u00e9llo'[1:3] }} "
    "{{ 'abc'[::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-2:] }} {{ 'abcdef'[4:1:-1] }}",
    "{{ messages[0].content }} {{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages|length }} "
    "{{ messages[1:]|length }}",
    "{{ 'x' if x is defined else 'y' }} {{ (1, 2)[0] }} {{ x.y if x is defined }}",
    "{{ 'abc' == 'abc' and 1 }} {{ [1] == [1] }} {{ [1] == (1,) }} {{ {'a': 1} == {'a': 1} }} {{ 1 == true }} "
    "{{ none == none }}",
    "{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }}",
    # filters
    "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'ABC'|lower }}|{{ 'abc'|upper }}|{{ 'hello world'|title }}|"
    "{{ 'hELLO'|capitalize }}",
    "{{ [1, 2, 3]|join(', ') }}|{{ ['a', 'b']|join }}|{{ messages|join(', ', attribute='role') }}",
    "{{ [3, 1]|first }} {{ [3, 1]|last }} {{ 'abc'|first }} {{ []|first is defined }} {{ 'abc'|list }} "
    "{{ [1, 2]|reverse|list }} {{ 'abc'|reverse }}",
    "{{ {'a': 1, 'b': 2}|items|list }} {{ x|items|list }} {{ {'a': 1}.items()|list }} {{ {'a': 1}.keys()|list }} "
    "{{ {'a': 1}.values()|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} "
    "{{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }}",
    "{{ [0, 1, 2, none]|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }} "
    "{{ [1, 5, 3]|select('gt', 2)|list }} {{ none|selectattr('a')|list }} {{ none|map('upper')|list }}",
    "{{ ['a', 'B']|map('upper')|list }} {{ messages|map(attribute='role')|list }} "
    "{{ messages|map(attribute='nope', default='d')|list }}",
    "{{ x|default('dflt') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|d('n') }} "
    "{{ 0|default(5, boolean=true) }}",
    "{{ '12'|int }} {{ '1.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.7|int }} {{ '2.5'|float }} {{ 1|float }} "
    "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.4|round(method='ceil') }}",
    "{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '.') }}",
    "{{ {'a': 1, 'b': [1, 2.5, none, true], 'c': '\u00e9\"\\n'}|tojson }} {{ [1, {'x': 'y'}]|tojson(indent=2) }} "
    "{{ '\u00e9'|tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} "
    "{{ {'a': {}}|tojson(indent=2) }} {{ [1, 2]|tojson(separators=(',', ':')) }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|"
    "{{ 'a\\nb'|indent('> ') }}",
    "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ [1, 2, 1]|unique|list }} "
    "{{ ['a', 'A']|unique(case_sensitive=true)|list }}",
    "{{ '<a&b>'|e }} {{ 'x'|safe }} {{ 5|string ~ 'x' }} {{ 'abc'|length }} {{ 'h\u00e9llo'|count }} "
    "{{ {'a': 1}|length }} {{ x|length }}",
    "{{ '\u00c0\u00c9'|lower }} {{ '\u00e0\u00e9'|upper }} {{ '\u01c5'|lower }} {{ 'caf\u00e9 au lait'|title }}",
    "{{ \"they're 1st-class (ok) [x] <y> {z}\"|title }}|{{ \"they're 1st-class\".title() }}|{{ 'hELLO wORLD'|capitalize }}",
    "{{ '0x10'|int }} {{ '0x10'|float }} {{ ' 1_000 '|int }} {{ '1e3'|int }} {{ '-2.5'|float }} {{ 'nan'|int }} {{ true|int }} "
    "{{ none|int }} {{ [1]|float }}",
    # tests
    "{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is number }} {{ true is number }} "
    "{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 'a' is string }}",
    "{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ x is iterable }} {{ 1 is iterable }} "
    "{{ 'a' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 6 is divisibleby 3 }} {{ 6 is divisibleby(4) }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} "
    "{{ 2 is ge 2 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 1 is in [1] }} {{ none is sameas none }} "
    "{{ true is true }} {{ false is false }} {{ 1 is true }}",
    "{{ range is callable }} {{ 'a'.strip is callable }} {{ 1 is not none }} {{ not x is defined }}",
    # methods
    "{{ '  a  '.strip() }}|{{ 'xax'.strip('x') }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|"
    "{{ '\\n\\na\\n'.lstrip('\\n') }}",
    "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a b '.split(none, 1) }} "
    "{{ 'a</think>b'.split('</think>')[-1] }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} "
    "{{ 'ABC'.lower() }} {{ 'abc'.upper() }} {{ 'ab cd'.title() }} {{ 'abc'.capitalize() }} "
    "{{ 'aXa'.replace('a', 'b') }} {{ 'h\u00e9llo'.find('l') }} {{ ', '.join(['a', 'b']) }}",
    "{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ messages[0].get('role') }}",
    "{{ messages[0].content.split(' ')|length }} {{ messages[0]['content'][:5] }}",
    # statements
    "{% set a = 1 %}{% set b, c = [2, 3] %}{{ a }}{{ b }}{{ c }}{% set d = 4, 5 %}{{ d }}",
    "{% set ns = namespace(x=1, y='a') %}{% for i in range(3) %}{% set ns.x = ns.x + i %}{% endfor %}"
    "{{ ns.x }}{{ ns.y }}{{ ns }}",
    "{% for i in range(3) %}{% if i == 1 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}{{ x }}",
    "{% set x = 1 %}{% for i in range(3) %}[{{ x }}]{% set x = i + 10 %}{% endfor %}{{ x }}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for i in range(5) if i is odd %}{{ loop.index }}/{{ loop.length }}:{{ i }} {% endfor %}",
    "{% for i in [] %}x{% else %}empty{% endfor %}{% for i in range(2) %}{{ loop.first }}{{ loop.last }}"
    "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.index0 }}{{ loop.previtem }}{{ loop.nextitem }}"
    "{{ loop.depth }}{{ loop.depth0 }}|{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}"
    "{{ i }}{% endfor %}",
    "{% for m in messages[::-1] %}{{ m.role }} {{ loop.index0 }};{% endfor %}",
    "{% for c in 'h\u00e9j' %}[{{ c }}]{% endfor %}{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"
    "{% for x in x %}never{% endfor %}",
    "{% set s %}captured {{ 1 + 1 }}{% endset %}[{{ s }}]",
    "{% generation %}gen {{ 'x' }}{% endgeneration %}",
    "{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}",
    "{{ raise_exception('custom failure') }}",
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok",
    "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(3)|list }} {{ range(1, 10, 3)|list }} "
    "{{ range(5, 0, -2)|list }}",
    "{{ bos_token }}{{ eos_token }}{{ unk_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ tools is none }}",
    "{%- for message in messages %}{{- message.role|upper }}{% if not loop.last %}, {% endif %}{%- endfor %}",
    "{{ (messages|last).content }} {{ messages[0] }}",
    "{% set content = messages[0].content %}{% if '</think>' in content %}yes{% else %}no{% endif %}",
    # transformers renders these; ratiocheck refuses them (docs/chat-templates.md)
    ("{{ 'Gr\u00fc\u00dfe'|upper }}", "c_refuses"),
    ("{{ 9223372036854775807 + 1 }}", "c_refuses"),
    ("{{ range(200000)|length }}", "both_fail"),
]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(path):
    with open(path, "rb") as f:
        return sha256_bytes(f.read())


def versions():
    return {
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "jinja2": jinja2.__version__,
        "huggingface-hub": huggingface_hub.__version__,
    }


# ---------------------------------------------------------------------------- folders


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, indent=2, ensure_ascii=True)
        f.write("\n")


def folder_template(name):
    t = FOLDERS[name][2]
    return published(t.split(":", 1)[1]) if t.startswith("published:") else t


def make_folder(out, name):
    src, specials, _, tfile, extra = FOLDERS[name]
    template = folder_template(name)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(TOKENIZER_FIXTURES, src, "tokenizer.json"))
    before = tok.get_vocab_size(with_added_tokens=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    for s in specials:
        assert tok.token_to_id(s) is not None, (name, s)
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"backend": "tokenizers", "model_max_length": 2048, "tokenizer_class": "TokenizersBackend"}
    cfg.update(extra)
    if tfile == "tokenizer_config.json":
        cfg["chat_template"] = template
    else:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="\n") as f:
            f.write(template)
    write_json(os.path.join(d, "tokenizer_config.json"), dict(sorted(cfg.items())))
    added = tok.get_vocab_size(with_added_tokens=True) - before
    log(f"{name}: tokenizer from tokenizers/{src} (+{added} tokens), template in {tfile}")


def variant_folder(tmp, out, entry):
    """A temporary folder: the named folder's tokenizer.json and bos / eos tokens + this template."""
    d = os.path.join(tmp, entry["name"])
    os.makedirs(d, exist_ok=True)
    base = FOLDERS[entry["tokenizer"]]
    shutil.copy(os.path.join(out, entry["tokenizer"], "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    cfg = {"backend": "tokenizers", "model_max_length": 2048, "tokenizer_class": "TokenizersBackend"}
    cfg.update({k: v for k, v in base[4].items() if k in ("bos_token", "eos_token")})
    if entry["template_file"] == "tokenizer_config.json":
        cfg["chat_template"] = entry["template"]
    else:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="\n") as f:
            f.write(entry["template"])
    write_json(os.path.join(d, "tokenizer_config.json"), dict(sorted(cfg.items())))
    return d


# ---------------------------------------------------------------------------- references


def as_messages(turns):
    out = []
    for t in turns:
        m = {"role": t[0], "content": t[1]}
        if len(t) > 2:
            m["reasoning_content"] = t[2]
        out.append(m)
    return out


def render_one(tok, entry, msgs, kwargs):
    try:
        text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kwargs)
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False,
                                      **kwargs)
    except jinja2.exceptions.TemplateError as e:  # raise_exception in the template
        return {"error": f"{type(e).__name__}: {e}", "raised": str(e)}
    ids = list(ids)
    assert tok(text, add_special_tokens=False)["input_ids"] == ids, entry["name"]
    return {"text": text, "ids": ids}


def render_all(folder, entry):
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tmpl = tok.chat_template
    assert isinstance(tmpl, str), (entry["name"], type(tmpl))
    want = entry["template"]
    if want is not None:
        assert tmpl == want, f"{entry['name']}: transformers did not load the template as written"
    out = {"results": [], "reasoning_results": [], "kwargs_results": []}
    for key, convs in (("results", CONVERSATIONS), ("reasoning_results", REASONING_CONVERSATIONS)):
        for cname, turns in convs:
            r = {"conversation": cname}
            r.update(render_one(tok, entry, as_messages(turns), {}))
            out[key].append(r)
    if "enable_thinking" in tmpl:
        for kw in KWARGS_VARIANTS:
            rs = []
            for cname, turns in CONVERSATIONS[:3] + REASONING_CONVERSATIONS:
                r = {"conversation": cname}
                r.update(render_one(tok, entry, as_messages(turns), kw))
                rs.append(r)
            out["kwargs_results"].append({"kwargs": kw, "results": rs})
    return tok, tmpl, out


def compact(text):
    """json.dumps(indent=1) with every list of integers on one line."""
    return re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def jinja_refs():
    cases = []
    for c in CONSTRUCTS:
        t, mark = (c, None) if isinstance(c, str) else c
        rec = {"template": t}
        try:
            rec["text"] = chat_template_utils._compile_jinja_template(t).render(**JINJA_VARS)
        except Exception as e:  # noqa: BLE001  (recorded: the C side must fail too)
            rec["error"] = f"{type(e).__name__}: {e}"
        if mark:
            rec["c_refuses"] = True
            assert (mark == "both_fail") == ("error" in rec), t
        cases.append(rec)
    return {"generator": "tools/make_chat_fixtures.py", "versions": versions(),
            "render": "transformers' _compile_jinja_template(template).render(**vars)",
            "strftime_now": FROZEN_NOW.isoformat(), "vars": JINJA_VARS, "cases": cases}


def generate(out, smollm2_dir):
    os.makedirs(out, exist_ok=True)
    for name in FOLDERS:
        make_folder(out, name)
    if os.path.realpath(os.path.join(out, "templates")) != os.path.realpath(TEMPLATES_DIR):
        shutil.copytree(TEMPLATES_DIR, os.path.join(out, "templates"), dirs_exist_ok=True)
    refs = {
        "generator": "tools/make_chat_fixtures.py",
        "versions": versions(),
        "apply_chat_template": "add_generation_prompt=True; ids: tokenize=True (add_special_tokens=False)",
        "strftime_now": FROZEN_NOW.isoformat(),
        "conversations": [{"name": n, "messages": as_messages(t)} for n, t in CONVERSATIONS],
        "reasoning_conversations": [{"name": n, "messages": as_messages(t)} for n, t in REASONING_CONVERSATIONS],
        "templates": [],
    }
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for e in TEMPLATES:
            rec = {"name": e["name"], "source": e["source"], "expect": e["expect"],
                   "template_file": e["template_file"]}
            if "published" in e:
                rec["published"] = e["published"]
            if "construct" in e:
                rec["construct"] = e["construct"]
            if e["tokenizer"].startswith("real:"):
                folder = smollm2_dir
                rec["real_model"] = e["tokenizer"][5:]
                rec["folder"] = "~/.cache/ratiocheck/smollm2/SmolLM2-135M-Instruct (tools/get_real_model.py)"
                rec["tokenizer_sha256"] = sha256_file(os.path.join(folder, "tokenizer.json"))
                rec["tokenizer_config_sha256"] = sha256_file(os.path.join(folder, "tokenizer_config.json"))
            elif e["template"] is None:
                folder = os.path.join(out, e["tokenizer"])
                rec["folder"] = f"data/fixtures/chat/{e['tokenizer']}"
            else:
                folder = variant_folder(tmp, out, e)
                rec["tokenizer_from"] = e["tokenizer"]
            tok, tmpl, res = render_all(folder, e)
            rec["template"] = tmpl
            rec["template_sha256"] = sha256_bytes(tmpl.encode("utf-8"))
            rec["bos_token"] = tok.bos_token
            rec["eos_token"] = tok.eos_token
            n_text = sum("text" in r for r in res["results"])
            if e["expect"] == "refuse":
                # only that transformers runs it: how many conversations it renders
                rec["rendered_by_transformers"] = n_text
            else:
                rec.update(res)
            refs["templates"].append(rec)
            summary.append((e["name"], e["expect"], e["template_file"], n_text, len(CONVERSATIONS),
                            sum("text" in r for r in res["reasoning_results"]),
                            len(res["kwargs_results"]), e.get("construct", ""), e.get("published")))
            log(f"{e['name']}: {e['expect']}, {n_text}/{len(CONVERSATIONS)} conversations rendered by transformers")
    with open(os.path.join(out, "chat_refs.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(compact(json.dumps(refs, indent=1, ensure_ascii=True)))
        f.write("\n")
    with open(os.path.join(out, "jinja_refs.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(jinja_refs(), indent=1, ensure_ascii=True))
        f.write("\n")
    write_readme(out, summary)


def write_readme(out, summary):
    L = []
    a = L.append
    a("# Chat template fixtures")
    a("")
    a("Reference renderings of `{\"messages\": [...]}` prompts for `src/formats/chat.c` and "
      "`src/formats/jinja_*.c`, generated by `tools/make_chat_fixtures.py` with transformers' "
      "`apply_chat_template` (jinja2); do not edit by hand (this README is generated too).")
    a("")
    a("## Regenerating")
    a("")
    a("```sh")
    a("pip install -r tools/requirements-chat-fixtures.txt")
    a("python3 tools/get_real_model.py                 # the SmolLM2 folder, if not there")
    a("python3 tools/make_chat_fixtures.py             # rewrites data/fixtures/chat/")
    a("python3 tools/make_chat_fixtures.py --check     # regenerates in a temp dir and compares")
    a("```")
    a("")
    a("Versions used:")
    a("")
    for k, v in versions().items():
        a(f"- {k} {v}")
    a("")
    a(f"`strftime_now()` is frozen at {FROZEN_NOW.isoformat()} (the C tests fix the same time).")
    a("")
    a("## Files")
    a("")
    a("- Tokenizer folders (tokenizers of `data/fixtures/tokenizers/` with the templates' special tokens "
      "added): `qwen2/` (Qwen2-Instruct's template), `qwen2_5/` (Qwen2.5-Instruct's, in "
      "`chat_template.jinja`), `qwen3/` (Qwen3's, in `chat_template.jinja`; `<think>`, `</think>` special), "
      "`llama3/` (Meta-Llama-3-8B-Instruct's), `mistral/` (Mistral-7B-Instruct-v0.1's), `gemma2/` "
      "(gemma-2-2b-it's), `phi3/` (Phi-3.5-mini-instruct's).")
    a("- `templates/`: published templates, copied unchanged from the `models/templates/` folder of "
      f"the llama.cpp repository `{LLAMA_CPP[0]}` at commit `{LLAMA_CPP[1]}` (llama.cpp's "
      "`models/templates/README.md`: fetched from each model's hub repository with "
      "`scripts/get_chat_template.py`), and `ollama-*.jinja`: the `gguf` field (the GGUF's "
      "`tokenizer.chat_template`, copied from the model's `tokenizer_config.json` by the conversion) of an Ollama "
      f"library entry in `{HF_JS[0]}` `{HF_JS[2]}` at commit `{HF_JS[1]}`. Their sources and SHA-256 are in "
      "the table below.")
    a("- `chat_refs.json`: the conversations (`conversations`, and `reasoning_conversations` with "
      "`<think>` in an assistant's content or a `reasoning_content` field), and per template its "
      "source, text (and SHA-256), the file it is read from, `expect` (`render` or `refuse`), and for "
      "those to render transformers' `text` and `ids` per conversation (or the `raised` message when "
      "the template calls `raise_exception`), and `kwargs_results` with `enable_thinking` false / true "
      "for the templates that read it; for those to refuse, the construct the refusal must name and how "
      "many conversations transformers renders. Templates without a folder here are stored in this file "
      "only: `tokenizer_from` names the folder whose `tokenizer.json` (and `bos_token` / `eos_token`) "
      "they use. `smollm2` is the real model folder of `tools/get_real_model.py` (not committed; its "
      "files' SHA-256 are recorded).")
    a("- `jinja_refs.json`: one construct per case (whitespace control, literals, operators, filters, "
      "tests, methods, statements), rendered by transformers' compiled template with the `vars` it "
      "records; `c_refuses` marks the cases ratiocheck refuses by design.")
    a("")
    a("## Summary")
    a("")
    a("| template | ratiocheck must | template file | rendered by transformers | reasoning conversations | "
      "enable_thinking runs | published as (model: repository path @ commit, SHA-256) |")
    a("|---|---|---|---|---|---|---|")
    for name, expect, tfile, n_text, n, n_reason, n_kw, construct, pubd in summary:
        must = "render" if expect == "render" else f"refuse ({construct})"
        src = "-"
        if pubd:
            sha = PUBLISHED[name][2] if name in PUBLISHED else OLLAMA[name][3]
            src = f"{pubd['model']}: `{pubd['repository']}` `{pubd['path']}` @ `{pubd['commit'][:12]}`, `{sha}`"
        a(f"| `{name}` | {must} | `{tfile}` | {n_text} / {n} | {n_reason} / {len(REASONING_CONVERSATIONS)} | "
          f"{n_kw} | {src} |")
    a("")
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--smollm2", default=DEFAULT_SMOLLM2, help="the SmolLM2 folder of tools/get_real_model.py")
    ap.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare with --out")
    ap.add_argument("--any-version", action="store_true", help="do not insist on the pinned versions")
    args = ap.parse_args()
    v = versions()
    bad = {k: v[k] for k in PINNED if v[k] != PINNED[k]}
    if bad and not args.any_version:
        log(f"versions differ from the pinned ones {PINNED}: {bad} (--any-version to go on)")
        return 2
    if not os.path.isfile(os.path.join(args.smollm2, "tokenizer_config.json")):
        log(f"{args.smollm2}: no SmolLM2 folder; run python3 tools/get_real_model.py first")
        return 2
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, "chat")
            generate(t, args.smollm2)
            cmp = filecmp.dircmp(t, args.out)
            diffs = []

            def walk(c, pre=""):
                diffs.extend(pre + x for x in c.left_only + c.right_only + c.diff_files + c.funny_files)
                for n, sub in c.subdirs.items():
                    walk(sub, pre + n + "/")
            walk(cmp)
            if diffs:
                log("differs: " + ", ".join(sorted(diffs)))
                return 1
            log("identical")
            return 0
    generate(args.out, args.smollm2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
