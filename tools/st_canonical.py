"""Deterministic safetensors files for the fixture generators.

safetensors' Rust writer keeps `__metadata__` in a HashMap with a per-process
random hash seed, so its key order (and therefore the file bytes) changes from
run to run. save_safetensors_canonical() writes with safetensors.torch.save and
re-serialises only the JSON header in a fixed order: sorted metadata keys,
tensors in data-offset order, padded with spaces to a multiple of 8 bytes like
the reference writer. The data section is left untouched.
"""
import json

from safetensors.torch import save as st_save


def save_safetensors_canonical(tensors, path, metadata):
    raw = st_save(tensors, metadata=metadata)
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    meta = header.pop("__metadata__", {})
    ordered = {"__metadata__": {k: meta[k] for k in sorted(meta)}}
    for k in sorted(header, key=lambda k: (header[k]["data_offsets"][0], k)):
        ordered[k] = header[k]
    hb = json.dumps(ordered, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        f.write(data)
