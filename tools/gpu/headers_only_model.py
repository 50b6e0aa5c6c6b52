#!/usr/bin/env python3
"""A Llama-2-7B-shaped model folder whose safetensors file has a real header and
no weights (a sparse file: the data region reads as zeros and takes no disk),
for `ratiocheck inspect`, which reads config.json and the headers only.

    python3 tools/gpu/headers_only_model.py /tmp/llama7b-headers
    build/src/ratiocheck inspect --model /tmp/llama7b-headers --no-speed --json
"""
import json
import struct
import sys

H, I, L, NH, V = 4096, 11008, 32, 32, 32000  # Llama-2-7B's config.json


def main(out):
    import os
    os.makedirs(out, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
           "num_key_value_heads": NH, "vocab_size": V, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "hidden_act": "silu"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    tensors, off = {}, 0

    def add(name, shape):
        nonlocal off
        n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        tensors[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n

    add("model.embed_tokens.weight", [V, H])
    add("lm_head.weight", [V, H])
    add("model.norm.weight", [H])
    for layer in range(L):
        p = f"model.layers.{layer}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            add(p + "self_attn." + n + ".weight", [H, H])
        add(p + "mlp.gate_proj.weight", [I, H])
        add(p + "mlp.up_proj.weight", [I, H])
        add(p + "mlp.down_proj.weight", [H, I])
        add(p + "input_layernorm.weight", [H])
        add(p + "post_attention_layernorm.weight", [H])
    header = json.dumps(tensors).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.truncate(8 + len(header) + off)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/llama7b-headers")
