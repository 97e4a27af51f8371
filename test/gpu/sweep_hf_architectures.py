#!/usr/bin/env python3
"""torch.compile(backend="kiln") over Hugging Face text architectures that
bench_torch_compile.py does not list, each built small from its config
(2 layers, width 1024, 16 heads, eager attention, bf16): how many sites
kilnc found, how many were rewritten, why the others were not, and the
output against eager's. A discovery sweep, not a benchmark: every site is
taken by Kiln (`choose="kiln"`), and each architecture's ONNX is kept where
a site was found and not rewritten (KILN_KEEP_GRAPHS under --cache).

    python3 test/gpu/sweep_hf_architectures.py --out sweep.json --cache DIR
    python3 test/gpu/sweep_hf_architectures.py --set more --out more.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

#: model_type → (Auto class, extra config). Text models only; each gets the
#: common sizes through its config's standard attribute names.
ARCHITECTURES: Dict[str, Any] = {
    "mixtral": ("AutoModelForCausalLM", dict(num_key_value_heads=4, num_local_experts=4)),
    "qwen2_moe": ("AutoModelForCausalLM", dict(num_key_value_heads=4, num_experts=4,
                                                moe_intermediate_size=512,
                                                shared_expert_intermediate_size=512)),
    "starcoder2": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "cohere": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "granite": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "olmo2": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "persimmon": ("AutoModelForCausalLM", {}),
    "nemotron": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "glm": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64, pad_token_id=0)),
    "helium": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64)),
    "gemma3_text": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                                 sliding_window=128)),
    "biogpt": ("AutoModelForCausalLM", {}),
    "xglm": ("AutoModelForCausalLM", {}),
    "ctrl": ("AutoModelForCausalLM", {}),
    "xlm-roberta": ("AutoModel", {}),
    "camembert": ("AutoModel", {}),
    "albert": ("AutoModel", dict(embedding_size=128)),
    "mpnet": ("AutoModel", {}),
    "megatron-bert": ("AutoModel", {}),
    "roformer": ("AutoModel", {}),
    "ernie": ("AutoModel", {}),
    "modernbert": ("AutoModel", dict(global_attn_every_n_layers=2, local_attention=128,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     cls_token_id=1, sep_token_id=2)),
    "esm": ("AutoModel", dict(pad_token_id=1)),
    "mbart": ("AutoModel", {}),
    "pegasus": ("AutoModel", {}),
    "marian": ("AutoModel", dict(decoder_vocab_size=1024, pad_token_id=0)),
    "m2m_100": ("AutoModel", {}),
    "mt5": ("AutoModel", dict(d_kv=64, d_ff=2816)),
    "umt5": ("AutoModel", dict(d_kv=64, d_ff=2816)),
    "longt5": ("AutoModel", dict(d_kv=64, d_ff=2816, encoder_attention_type="local")),
}

#: A second set (`--set more`): architectures released since the first, and
#: older encoders and seq2seq models with attention of their own (MLA,
#: attention sinks, differential attention, chunked and sliding layers,
#: tiny heads).
MORE_ARCHITECTURES: Dict[str, Any] = {
    "gpt_oss": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                             num_local_experts=4, num_experts_per_tok=2,
                                             sliding_window=128)),
    "qwen3_moe": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                               num_experts=4, num_experts_per_tok=2,
                                               moe_intermediate_size=704)),
    "deepseek_v3": ("AutoModelForCausalLM", dict(
        num_key_value_heads=16, q_lora_rank=512, kv_lora_rank=256, qk_rope_head_dim=32,
        qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=4, num_experts_per_tok=2,
        first_k_dense_replace=1, moe_intermediate_size=704, n_group=1, topk_group=1)),
    "deepseek_v2": ("AutoModelForCausalLM", dict(
        num_key_value_heads=16, q_lora_rank=None, kv_lora_rank=256, qk_rope_head_dim=32,
        qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=4, num_experts_per_tok=2,
        first_k_dense_replace=1, moe_intermediate_size=704, n_group=1, topk_group=1)),
    "olmoe": ("AutoModelForCausalLM", dict(num_key_value_heads=4, num_experts=4,
                                           num_experts_per_tok=2)),
    "phimoe": ("AutoModelForCausalLM", dict(num_key_value_heads=4, num_local_experts=4)),
    "granitemoe": ("AutoModelForCausalLM", dict(num_key_value_heads=4, num_local_experts=4)),
    "exaone4": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                             sliding_window=128)),
    "smollm3": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "ministral": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                               sliding_window=128)),
    "arcee": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "seed_oss": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64)),
    "hunyuan_v1_dense": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64)),
    "ernie4_5": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64)),
    "glm4": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64, pad_token_id=0)),
    "diffllama": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "cohere2": ("AutoModelForCausalLM", dict(num_key_value_heads=4, sliding_window=128)),
    "apertus": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "vaultgemma": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64)),
    "bitnet": ("AutoModelForCausalLM", dict(num_key_value_heads=4)),
    "llama4_text": ("AutoModelForCausalLM", dict(num_key_value_heads=4, head_dim=64,
                                                 attention_chunk_size=128, num_local_experts=2,
                                                 intermediate_size_mlp=2816)),
    "deberta": ("AutoModel", {}),
    "squeezebert": ("AutoModel", {}),
    "mobilebert": ("AutoModel", {}),
    "big_bird": ("AutoModel", dict(attention_type="original_full")),
    "rembert": ("AutoModel", dict(input_embedding_size=256, output_embedding_size=256)),
    "xmod": ("AutoModel", dict(pad_token_id=1)),
    "data2vec-text": ("AutoModel", dict(pad_token_id=1)),
    "convbert": ("AutoModel", {}),
    "nezha": ("AutoModel", {}),
    "blenderbot": ("AutoModel", {}),
    "plbart": ("AutoModel", {}),
    "bigbird_pegasus": ("AutoModel", dict(attention_type="original_full")),
    "switch_transformers": ("AutoModel", dict(d_kv=64, d_ff=2816, num_experts=4)),
}

COMMON = dict(hidden_size=1024, num_attention_heads=16, num_hidden_layers=2,
              intermediate_size=2816, vocab_size=1024, max_position_embeddings=2048)


def build(name: str, torch: Any, tf: Any) -> Any:
    auto, extra = {**ARCHITECTURES, **MORE_ARCHITECTURES}[name]
    kwargs = dict(COMMON, **extra)
    config = tf.AutoConfig.for_model(name, **kwargs)
    for attribute, value in (("d_model", 1024), ("encoder_layers", 2), ("decoder_layers", 2),
                             ("encoder_attention_heads", 16), ("decoder_attention_heads", 16),
                             ("encoder_ffn_dim", 2816), ("decoder_ffn_dim", 2816),
                             ("num_layers", 2), ("num_decoder_layers", 2), ("num_heads", 16)):
        if hasattr(config, attribute):
            setattr(config, attribute, value)
    cls = getattr(tf, auto)
    model = cls.from_config(config, attn_implementation="eager", torch_dtype=torch.bfloat16)
    return model.cuda().eval(), config


def inputs_for(model: Any, config: Any, batch: int, seq: int, torch: Any) -> Dict[str, Any]:
    ids = torch.randint(3, 1000, (batch, seq), device="cuda")
    mask = torch.ones(batch, seq, dtype=torch.long, device="cuda")
    mask[0, seq - seq // 4:] = 0  # one padded sequence
    given = {"input_ids": ids, "attention_mask": mask}
    if getattr(config, "is_encoder_decoder", False):
        given["decoder_input_ids"] = torch.randint(3, 1000, (batch, seq // 2), device="cuda")
    return given


def first_tensor(output: Any) -> Any:
    if hasattr(output, "last_hidden_state"):
        return output.last_hidden_state
    if hasattr(output, "logits"):
        return output.logits
    return output[0]


def relative_error(got: Any, want: Any) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--set", choices=("first", "more"), default="first",
                        help="which list to sweep where --only names none")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--out", default="")
    parser.add_argument("--cache", default="", help="KILN_CACHE (graphs kept there)")
    options = parser.parse_args()
    if options.cache:
        os.environ["KILN_CACHE"] = options.cache
        os.environ["KILN_KEEP_GRAPHS"] = "1"
    import torch
    import transformers as tf

    import kiln.dynamo

    names = [n for n in options.only.split(",") if n] or list(
        ARCHITECTURES if options.set == "first" else MORE_ARCHITECTURES)
    rows: List[Dict[str, Any]] = []
    for name in names:
        began = time.perf_counter()
        row: Dict[str, Any] = {"model": name}
        try:
            torch.manual_seed(0)
            model, config = build(name, torch, tf)
            given = inputs_for(model, config, options.batch, options.seq, torch)
            with torch.no_grad():
                want = first_tensor(model(**given)).float()
                torch._dynamo.reset()
                start = len(kiln.dynamo.reports)
                compiled = torch.compile(model, backend="kiln",
                                         options={"kiln": {"choose": "kiln"}})
                got = first_tensor(compiled(**given)).float()
            entries = kiln.dynamo.reports[start:]
            sites = sum(len((e.get("report") or {}).get("sites", [])) for e in entries)
            rewritten = sum(len(e["rewritten"]) for e in entries)
            unfused = [u.get("reason") for e in entries
                       for u in (e.get("report") or {}).get("unfused", [])]
            skipped = [str(why)[:300] for e in entries for why in e["skipped"].values()]
            fallbacks = [e["fallback"][:300] for e in entries if e.get("fallback")]
            row.update(graphs=len(entries), sites=sites, rewritten=rewritten,
                       unfused=unfused, skipped=skipped, fallbacks=fallbacks,
                       keys=[e.get("key") for e in entries],
                       rel_err_vs_eager=relative_error(got, want))
        except Exception as error:  # noqa: BLE001 (an architecture this transformers lacks)
            row["error"] = f"{type(error).__name__}: {error}"[:600]
            row["trace"] = traceback.format_exc()[-1500:]
        row["wall_s"] = round(time.perf_counter() - began, 1)
        rows.append(row)
        brief = row.get("error") or (
            f"graphs {row['graphs']} sites {row['sites']} rewritten {row['rewritten']} "
            f"err_vs_eager {row['rel_err_vs_eager']:.1e} unfused {row['unfused']} "
            f"skipped {row['skipped']} fallbacks {row['fallbacks']}")
        print(f"{name}: {brief} [{row['wall_s']} s]", flush=True)
        if options.out:
            Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
