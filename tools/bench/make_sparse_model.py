#!/usr/bin/env python3
"""A Llama-shaped model folder whose weights are a sparse file: config.json and a
model.safetensors with a real header and no data on disk (reads give zeros).

For `ratiocheck inspect`, which reads config.json and the safetensors headers only:
the memory estimate of a model too large to create on this machine.

    python3 tools/bench/make_sparse_model.py OUT_DIR [--dtype BF16|F16|F32]
        [--hidden 4096 --intermediate 11008 --layers 32 --heads 32 --kv-heads 32 --vocab 32000]

The defaults are Llama-2-7B's shape. Standard library only.
"""
import argparse
import json
import os
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dtype", default="BF16", choices=["BF16", "F16", "F32"])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args()
    H, I, L, V = a.hidden, a.intermediate, a.layers, a.vocab
    d = H // a.heads
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "vocab_size": V, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[a.dtype]}
    es = {"BF16": 2, "F16": 2, "F32": 4}[a.dtype]
    tensors = [("model.embed_tokens.weight", [V, H]), ("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
    for i in range(L):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
                    (p + "self_attn.q_proj.weight", [a.heads * d, H]),
                    (p + "self_attn.k_proj.weight", [a.kv_heads * d, H]),
                    (p + "self_attn.v_proj.weight", [a.kv_heads * d, H]),
                    (p + "self_attn.o_proj.weight", [H, a.heads * d]),
                    (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
                    (p + "mlp.down_proj.weight", [H, I])]
    header, off = {}, 0
    for name, shape in tensors:
        n = es
        for x in shape:
            n *= x
        header[name] = {"dtype": a.dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)  # data starts 8-byte aligned, as the safetensors writer does
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.truncate(8 + len(hb) + off)
    print(f"{a.out}: {sum(1 for _ in tensors)} tensors, {off / 1e9:.2f} GB of {a.dtype} (sparse)")


if __name__ == "__main__":
    main()
