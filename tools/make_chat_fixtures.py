#!/usr/bin/env python3
"""Generate data/fixtures/chat/: reference chat renderings for src/formats/chat.c.

ratiocheck renders {"messages": [...]} prompt lines with the model's chat template
(src/formats/chat.c recognises two template families, it does not run Jinja). The
references here come from transformers' own ``apply_chat_template`` (Jinja):

    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids  = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                   return_dict=False)

(the ids are the text tokenized with add_special_tokens=False; the script checks that
``tok(text, add_special_tokens=False).input_ids == ids``).

Pinned versions (tools/requirements-chat-fixtures.txt; the script refuses others unless
--any-version): python 3.11.7, transformers 5.24.0, tokenizers 0.23.3, jinja2 3.1.6,
huggingface-hub 2.4.0. CPU only, no network, deterministic (``--check`` regenerates into a
temporary folder and compares byte for byte).

Template folders written (tokenizers from data/fixtures/tokenizers/, re-saved with the
``tokenizers`` library after ``add_special_tokens`` of the tokens the template writes; no
hub access is needed or used):

    qwen2/     qwen2_split's tokenizer + <|im_start|>, <|im_end|>; tokenizer_config.json
               with Qwen2-Instruct's chat_template (as in Qwen/Qwen2-7B-Instruct)
    qwen2_5/   the same tokenizer; Qwen2.5-Instruct's template (Qwen/Qwen2.5-0.5B-Instruct,
               with its tool-call branches) in chat_template.jinja, as transformers 5 saves it
    llama3/    llama3_split's tokenizer + <|begin_of_text|>, <|start_header_id|>,
               <|end_header_id|>, <|eot_id|>; Meta-Llama-3-8B-Instruct's template and bos_token
    mistral/   mistral_metaspace's tokenizer; Mistral-7B-Instruct-v0.1's [INST] template,
               which ratiocheck must refuse

The template texts are the published ones (data, not code), as quoted in public code
found with a code search: the hub's tokenizer_config.json "chat_template" values of
Qwen/Qwen2-7B-Instruct, Qwen/Qwen2.5-0.5B-Instruct, meta-llama/Meta-Llama-3-8B-Instruct
and mistralai/Mistral-7B-Instruct-v0.1. Their SHA-256 are recorded in chat_refs.json.

Besides those, a few variants written here test that the recogniser looks at the
template's structure (whitespace control, quoting, attribute vs subscript access,
literals split with +) and not its exact text; each is rendered by transformers too.
They are stored in chat_refs.json only (``"tokenizer_from"`` names the folder whose
tokenizer.json they use; the C test writes a temporary folder).

SmolLM2: the real model folder made by ``python3 tools/get_real_model.py``
(~/.cache/ratiocheck/smollm2/SmolLM2-135M-Instruct, or --smollm2 DIR) is read in place and
only its references are stored (template "smollm2", with the SHA-256 of the folder's
tokenizer.json and tokenizer_config.json). The conversations contain no digits, so the
two pre-tokenizers get_real_model.py can write give the same ids.

Output: data/fixtures/chat/chat_refs.json (conversations; per template: source, file the
template is read from, whether ratiocheck must render or refuse it, and per conversation the
rendered text and ids), the four folders, and README.md.

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

import huggingface_hub  # noqa: E402
import jinja2  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

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

# ---------------------------------------------------------------------------- the template list

# name, kind (folder / variant / real), where, template, template_file, expect, extra
FOLDERS = {
    # name: (source tokenizer fixture, tokens to make sure are special, template, file, config extras)
    "qwen2": ("qwen2_split", ["<|im_start|>", "<|im_end|>"], QWEN2_TEMPLATE, "tokenizer_config.json",
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen2_5": ("qwen2_split", ["<|im_start|>", "<|im_end|>"], QWEN25_TEMPLATE, "chat_template.jinja",
                {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "llama3": ("llama3_split", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               LLAMA3_TEMPLATE, "tokenizer_config.json",
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "mistral": ("mistral_metaspace", [], MISTRAL_TEMPLATE, "tokenizer_config.json",
                {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
}

TEMPLATES = [
    # name, source, tokenizer (folder name, or "real:smollm2"), template (None: the folder's),
    # template file, expect, family, default system message
    dict(name="smollm2", source="the real model folder (tools/get_real_model.py; the GGUF's chat template)",
         tokenizer="real:smollm2", template=None, template_file="tokenizer_config.json", expect="render",
         family="chatml", default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
    dict(name="qwen2", source="Qwen/Qwen2-7B-Instruct tokenizer_config.json (published)", tokenizer="qwen2",
         template=None, template_file="tokenizer_config.json", expect="render", family="chatml",
         default_system="You are a helpful assistant."),
    dict(name="qwen2_5", source="Qwen/Qwen2.5-0.5B-Instruct tokenizer_config.json (published), saved as "
         "chat_template.jinja", tokenizer="qwen2_5", template=None, template_file="chat_template.jinja",
         expect="render", family="chatml",
         default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    dict(name="llama3", source="meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json (published)",
         tokenizer="llama3", template=None, template_file="tokenizer_config.json", expect="render",
         family="llama3", default_system=None),
    dict(name="chatml_reformatted", source="variant written by make_chat_fixtures.py", tokenizer="qwen2",
         template=CHATML_REFORMATTED, template_file="tokenizer_config.json", expect="render", family="chatml",
         default_system="A default system message, with 'quotes', \"double quotes\" and \u00fcn\u00efc\u00f6d\u00e9."),
    dict(name="chatml_blocks", source="variant written by make_chat_fixtures.py", tokenizer="qwen2",
         template=CHATML_BLOCKS, template_file="chat_template.jinja", expect="render", family="chatml",
         default_system="You are a test model."),
    dict(name="chatml_nosystem", source="variant written by make_chat_fixtures.py", tokenizer="qwen2",
         template=CHATML_NOSYSTEM, template_file="tokenizer_config.json", expect="render", family="chatml",
         default_system=None),
    dict(name="llama3_simple", source="variant written by make_chat_fixtures.py", tokenizer="llama3",
         template=LLAMA3_SIMPLE, template_file="tokenizer_config.json", expect="render", family="llama3",
         default_system=None),
    dict(name="mistral", source="mistralai/Mistral-7B-Instruct-v0.1 tokenizer_config.json (published)",
         tokenizer="mistral", template=None, template_file="tokenizer_config.json", expect="refuse"),
    dict(name="chatml_extra_newline", source="near miss written by make_chat_fixtures.py", tokenizer="qwen2",
         template=CHATML_EXTRA_NEWLINE, template_file="tokenizer_config.json", expect="refuse",
         differs_on=("user_only", "chatml", "You are a test model.")),
    dict(name="chatml_trim", source="near miss written by make_chat_fixtures.py", tokenizer="qwen2",
         template=CHATML_TRIM, template_file="tokenizer_config.json", expect="refuse",
         differs_on=("spaces", "chatml", None)),
    dict(name="chatml_system_every_turn", source="near miss written by make_chat_fixtures.py",
         tokenizer="qwen2", template=CHATML_SYSTEM_EVERY_TURN, template_file="tokenizer_config.json",
         expect="refuse", differs_on=("multi_turn", "chatml", "You are a helpful assistant.")),
    dict(name="gemma", source="a Gemma-style template written by make_chat_fixtures.py", tokenizer="llama3",
         template=GEMMA_TEMPLATE, template_file="tokenizer_config.json", expect="refuse"),
    dict(name="llama31_like", source="the opening of a Llama-3.1-style template (dated system message)",
         tokenizer="llama3", template=LLAMA31_LIKE, template_file="tokenizer_config.json", expect="refuse"),
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


def make_folder(out, name):
    src, specials, template, tfile, extra = FOLDERS[name]
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
    """A temporary folder: the named folder's tokenizer.json + this template."""
    d = os.path.join(tmp, entry["name"])
    os.makedirs(d, exist_ok=True)
    base = FOLDERS[entry["tokenizer"]]
    shutil.copy(os.path.join(out, entry["tokenizer"], "tokenizer.json"), os.path.join(d, "tokenizer.json"))
    cfg = {"backend": "tokenizers", "model_max_length": 2048, "tokenizer_class": "TokenizersBackend"}
    cfg.update(base[4])
    if entry["template_file"] == "tokenizer_config.json":
        cfg["chat_template"] = entry["template"]
    else:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="\n") as f:
            f.write(entry["template"])
    write_json(os.path.join(d, "tokenizer_config.json"), dict(sorted(cfg.items())))
    return d


# ---------------------------------------------------------------------------- references


def as_messages(turns):
    return [{"role": r, "content": c} for r, c in turns]


def chatml(turns, default_system):
    s = ""
    if default_system is not None and turns[0][0] != "system":
        s += f"<|im_start|>system\n{default_system}<|im_end|>\n"
    for r, c in turns:
        s += f"<|im_start|>{r}\n{c}<|im_end|>\n"
    return s + "<|im_start|>assistant\n"


def llama3(turns, bos):
    s = bos
    for r, c in turns:
        s += f"<|start_header_id|>{r}<|end_header_id|>\n\n{c.strip()}<|eot_id|>"
    return s + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def render_all(folder, entry):
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tmpl = tok.chat_template
    assert isinstance(tmpl, str), (entry["name"], type(tmpl))
    want = entry["template"]
    if want is not None:
        assert tmpl == want, f"{entry['name']}: transformers did not load the template as written"
    results, rendered_ok = [], 0
    for cname, turns in CONVERSATIONS:
        msgs = as_messages(turns)
        try:
            text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        except Exception as e:  # noqa: BLE001  (the refused templates may raise)
            assert entry["expect"] == "refuse", (entry["name"], cname, e)
            results.append({"conversation": cname, "error": f"{type(e).__name__}: {e}"})
            continue
        ids = list(ids)
        assert tok(text, add_special_tokens=False)["input_ids"] == ids, (entry["name"], cname)
        r = {"conversation": cname, "text": text, "ids": ids}
        if entry["expect"] == "render":
            # the family's layout, independently of Jinja: what chat.c must produce
            if entry["family"] == "chatml":
                layout = chatml(turns, entry["default_system"])
            else:
                layout = llama3(turns, tok.bos_token)
            assert text == layout, f"{entry['name']}/{cname}: Jinja's text is not the {entry['family']} layout"
            rendered_ok += 1
        results.append(r)
    if "differs_on" in entry:
        # a near miss: Jinja's text is not the layout it resembles
        cname, family, default = entry["differs_on"]
        r = next(r for r in results if r["conversation"] == cname)
        turns = dict(CONVERSATIONS)[cname]
        layout = chatml(turns, default) if family == "chatml" else llama3(turns, tok.bos_token)
        assert r["text"] != layout, (entry["name"], cname)
    return tok, tmpl, results, rendered_ok


def compact(text):
    """json.dumps(indent=1) with every list of integers on one line."""
    return re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def generate(out, smollm2_dir):
    os.makedirs(out, exist_ok=True)
    for name in FOLDERS:
        make_folder(out, name)
    refs = {
        "generator": "tools/make_chat_fixtures.py",
        "versions": versions(),
        "apply_chat_template": "add_generation_prompt=True; ids: tokenize=True (add_special_tokens=False)",
        "conversations": [{"name": n, "messages": as_messages(t)} for n, t in CONVERSATIONS],
        "templates": [],
    }
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for e in TEMPLATES:
            rec = {"name": e["name"], "source": e["source"], "expect": e["expect"],
                   "template_file": e["template_file"]}
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
            tok, tmpl, results, ok = render_all(folder, e)
            rec["template"] = tmpl
            rec["template_sha256"] = sha256_bytes(tmpl.encode("utf-8"))
            if e["expect"] == "render":
                rec["family"] = e["family"]
                rec["default_system"] = e["default_system"]
            rec["bos_token"] = tok.bos_token
            if e["expect"] == "refuse":
                # only what shows the refusal is right: the text of the conversation where Jinja's
                # output leaves the layout it resembles, and how many conversations Jinja renders
                rec["rendered_by_transformers"] = sum("text" in r for r in results)
                if "differs_on" in e:
                    r = next(r for r in results if r["conversation"] == e["differs_on"][0])
                    rec["differs_on"] = {"conversation": r["conversation"], "text": r["text"]}
                results = []
            rec["results"] = results
            refs["templates"].append(rec)
            n_text = rec.get("rendered_by_transformers", sum("text" in r for r in results))
            summary.append((e["name"], e["expect"], e["template_file"], n_text, len(CONVERSATIONS), ok))
            log(f"{e['name']}: {e['expect']}, {n_text}/{len(CONVERSATIONS)} conversations rendered by transformers"
                + (f", all {ok} in the {e['family']} layout" if e["expect"] == "render" else ""))
    with open(os.path.join(out, "chat_refs.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(compact(json.dumps(refs, indent=1, ensure_ascii=True)))
        f.write("\n")
    write_readme(out, summary)


def write_readme(out, summary):
    L = []
    a = L.append
    a("# Chat template fixtures")
    a("")
    a("Reference renderings of `{\"messages\": [...]}` prompts for `src/formats/chat.c`, generated by "
      "`tools/make_chat_fixtures.py` with transformers' `apply_chat_template` (Jinja); do not edit by "
      "hand (this README is generated too).")
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
    a("## Files")
    a("")
    a("- `qwen2/`: `tokenizers/qwen2_split`'s tokenizer (`<|im_start|>`, `<|im_end|>` special), "
      "`tokenizer_config.json` with Qwen2-Instruct's published `chat_template`.")
    a("- `qwen2_5/`: the same tokenizer; Qwen2.5-Instruct's published template (tool-call branches "
      "included) in `chat_template.jinja`, as transformers 5 saves templates.")
    a("- `llama3/`: `tokenizers/llama3_split`'s tokenizer (`<|begin_of_text|>`, `<|start_header_id|>`, "
      "`<|end_header_id|>`, `<|eot_id|>` special), Meta-Llama-3-8B-Instruct's published template, "
      "`bos_token` `<|begin_of_text|>`.")
    a("- `mistral/`: `tokenizers/mistral_metaspace`'s tokenizer with Mistral-7B-Instruct-v0.1's "
      "`[INST]` template: ratiocheck must refuse it.")
    a("- `chat_refs.json`: the conversations, and per template its source, text (and SHA-256), the file "
      "it is read from, `expect` (`render` or `refuse`), and for those to render, per conversation, "
      "transformers' rendered `text` and `ids`; for those to refuse, how many conversations Jinja renders "
      "and, for the near misses, the text where Jinja leaves the layout they resemble. Templates without a folder here are variants: "
      "`tokenizer_from` names the folder whose `tokenizer.json` they use. `smollm2` is the real model "
      "folder of `tools/get_real_model.py` (not committed; its files' SHA-256 are recorded).")
    a("")
    a("## Summary")
    a("")
    a("| template | ratiocheck must | template file | rendered by transformers | in the family's layout |")
    a("|---|---|---|---|---|")
    for name, expect, tfile, n_text, n, ok in summary:
        a(f"| `{name}` | {expect} | `{tfile}` | {n_text} / {n} | {ok if expect == 'render' else '-'} |")
    a("")
    a("\"In the family's layout\": the script also builds the expected text without Jinja (ChatML: "
      "`<|im_start|>{role}\\n{content}<|im_end|>\\n` per turn after the default system turn when the "
      "first is not a system message, then `<|im_start|>assistant\\n`; Llama-3: `bos_token`, then "
      "`<|start_header_id|>{role}<|end_header_id|>\\n\\n{content.strip()}<|eot_id|>` per turn, then the "
      "assistant header) and asserts it equals Jinja's.")
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
