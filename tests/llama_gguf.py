"""Write a tiny random-weight Llama GGUF from llama.cpp's vocab-only GGUF (for the opt-in llama-server test).

Timing does not depend on weight values, so random weights give a real server
with real kernels and no download. Needs the `gguf` package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def copy_tokenizer(reader: Any, writer: Any) -> int:
    """Copy every tokenizer.* field of the vocab GGUF; returns the vocabulary size."""
    import gguf

    vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            values = [field.parts[i] for i in field.data]
            if sub == gguf.GGUFValueType.STRING:
                items = [bytes(v).decode("utf-8", errors="replace") for v in values]
            else:
                items = [v.tolist()[0] for v in values]
            writer.add_array(name, items)
            if name == "tokenizer.ggml.tokens":
                vocab = len(items)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(name, bytes(field.parts[field.data[0]]).decode())
        else:
            value = field.parts[field.data[0]].tolist()[0]
            writer.add_key_value(name, value, kind)
    return vocab


def write_tiny_llama(
    vocab_gguf: Path,
    out: Path,
    hidden: int = 256,
    layers: int = 4,
    heads: int = 4,
    ffn: int = 688,
    context: int = 4096,
    seed: int = 0,
) -> Path:
    import gguf

    reader = gguf.GGUFReader(str(vocab_gguf))
    writer = gguf.GGUFWriter(str(out), "llama")
    vocab = copy_tokenizer(reader, writer)
    writer.add_name("tokenroof-tiny-llama")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    rng = np.random.default_rng(seed)

    def tensor(name: str, *shape: int, ones: bool = False) -> None:
        data = np.ones(shape, np.float32) if ones else (rng.standard_normal(shape) * 0.02).astype(np.float32)
        writer.add_tensor(name, data)

    tensor("token_embd.weight", vocab, hidden)
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", hidden, ones=True)
        for proj in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{proj}.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_norm.weight", hidden, ones=True)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_up.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, ffn)
    tensor("output_norm.weight", hidden, ones=True)
    tensor("output.weight", vocab, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
