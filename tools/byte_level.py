"""GPT-2's byte-level BPE alphabet, shared by the tokenizer tools (standard library only)."""


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (what ByteLevel uses; as transformers'
    convert_slow_tokenizer builds it)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
