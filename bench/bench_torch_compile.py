#!/usr/bin/env python3
"""Forward (prefill) time of models whose attention is written out, eager,
under ``torch.compile`` (Inductor) and under ``torch.compile(backend="kiln")``.

    python3 bench/bench_torch_compile.py [--seqs 1024,4096] [--tokens 16384]
        [--models llama,gpt2,...] [--no-time] [--kiln-first] [--out rows.json]

Models: Hugging Face models built from configs with random weights in
``attn_implementation="eager"`` (Llama, Mistral, Qwen2 with GQA, Gemma 2 with
soft-capping, GPT-2, BERT, T5, BLOOM, ViT, Whisper, CLIP; and more_hf_models:
OPT, GPT-NeoX, Falcon and GPT-BigCode with one K/V head, Phi, Phi-3,
StableLM, GPT-J, GPT-Neo, MPT, Qwen3, OLMo, Gemma, RoBERTa, DistilBERT,
ELECTRA, DeBERTa-v2, BART; hidden 1024, 16 heads, 2 layers, vocabulary
1024) and the hand-written modules of test/gpu/check_torch_compile.py; bf16,
b·s = --tokens tokens at each s. Outputs are checked first (relative error of
the last hidden state or logits, bf16 bound 3e-2): against the float64
output for the hand-written modules (both zoos: check_torch_compile.py's
and research_zoo.py's) up to 4k tokens, else against eager. Rows:
``{model, s, impl: "eager"|"inductor"|"kiln", ms, sites, fused}`` with
`sites` the sites Kiln's fusion found, `fused` the sites it rewrote (kiln)
or the SDPA calls Inductor's own patterns made (inductor), and `compile_s`
the wall time of the first call (Dynamo, Inductor, and for Kiln the export,
kilnc, its sites' compiles and the timed choices), each path's first call
with empty compile caches (Inductor's, Triton's and Kiln's; --warm keeps
them), Inductor's first unless --kiln-first, and for Kiln `compile_ratio`
(its first call over Inductor's), `steps` (the main thread's seconds by
step, summed over the graphs: kiln.dynamo's entries' `seconds`) and
`overlapped` (kilnc's and the site packages' own seconds, spent beside
the steps). Times: eager, Inductor and Kiln timed in turns, 7 rounds of about
20 ms each, the median round of each (check_torch_compile.time_interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test" / "gpu"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402
from check_torch_compile import relative_error, time_interleaved  # noqa: E402

DEVICE = torch.device("cuda")
DTYPE = torch.bfloat16


def hf_models(seq: int) -> Dict[str, Callable[[], torch.nn.Module]]:
    import transformers as tf

    common = dict(hidden_size=1024, num_attention_heads=16, num_hidden_layers=2,
                  intermediate_size=2816, vocab_size=1024,
                  max_position_embeddings=max(seq, 2048))
    seq2seq = dict(d_model=1024, vocab_size=1024)

    def causal(config):
        return lambda: tf.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", torch_dtype=DTYPE)

    def model(cls, config):
        return lambda: cls._from_config(config, attn_implementation="eager",
                                        torch_dtype=DTYPE)

    return {
        "llama": causal(tf.LlamaConfig(num_key_value_heads=4, **common)),
        "mistral": causal(tf.MistralConfig(num_key_value_heads=4,
                                           sliding_window=max(seq // 2, 512), **common)),
        "qwen2": causal(tf.Qwen2Config(num_key_value_heads=4, **common)),
        "gemma2": causal(tf.Gemma2Config(num_key_value_heads=4, head_dim=64,
                                         attn_logit_softcapping=50.0,
                                         sliding_window=max(seq // 2, 512), **common)),
        "gpt2": causal(tf.GPT2Config(n_embd=1024, n_head=16, n_layer=2,
                                     vocab_size=1024, n_positions=max(seq, 1024))),
        "bert": model(tf.BertModel, tf.BertConfig(**common)),
        "t5": model(tf.T5Model, tf.T5Config(
            num_heads=16, d_kv=64, d_ff=2816, num_layers=2, num_decoder_layers=2,
            **seq2seq)),
        "t5_encoder": model(tf.T5EncoderModel, tf.T5Config(
            num_heads=16, d_kv=64, d_ff=2816, num_layers=2, **seq2seq)),
        "bloom": causal(tf.BloomConfig(hidden_size=1024, n_head=16, n_layer=2,
                                       vocab_size=1024)),
        "vit": model(tf.ViTModel, tf.ViTConfig(
            hidden_size=1024, num_hidden_layers=2, num_attention_heads=16,
            intermediate_size=2816, image_size=vit_image(seq), patch_size=16)),
        "whisper": model(tf.WhisperModel, tf.WhisperConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=16,
            decoder_attention_heads=16, encoder_ffn_dim=2816, decoder_ffn_dim=2816,
            num_mel_bins=80, max_source_positions=seq,
            max_target_positions=max(seq, 448), pad_token_id=0, **seq2seq)),
        "clip": model(tf.CLIPTextModel, tf.CLIPTextConfig(
            hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
            num_attention_heads=16, max_position_embeddings=seq, vocab_size=1024)),
        **more_hf_models(tf, seq, common, causal, model),
    }


def more_hf_models(tf: Any, seq: int, common: Dict[str, Any], causal: Callable,
                   model: Callable) -> Dict[str, Callable[[], torch.nn.Module]]:
    """Further Hugging Face architectures, each with an attention written
    its own way (or through transformers' shared eager function with its
    own mask, scale or head layout); an architecture this transformers
    lacks raises when built."""
    positions = max(seq, 2048)

    def config(name: str, **kwargs: Any) -> Callable[[], Any]:
        def make() -> Any:
            cls = getattr(tf, name, None)
            if cls is None:
                raise RuntimeError(f"transformers {tf.__version__} has no {name}")
            return cls(**kwargs)
        return make

    def later(wrap: Callable, make: Callable[[], Any], *cls: str) -> Callable[[], Any]:
        def build() -> Any:
            classes = [getattr(tf, c) for c in cls]
            return wrap(*classes, make())() if classes else wrap(make())()
        return build

    bert_like = dict(common, max_position_embeddings=positions)
    return {
        "opt": later(causal, config("OPTConfig", hidden_size=1024, num_attention_heads=16,
                                    num_hidden_layers=2, ffn_dim=2816, vocab_size=1024,
                                    max_position_embeddings=positions,
                                    word_embed_proj_dim=1024)),
        "gpt_neox": later(causal, config("GPTNeoXConfig", **common)),
        "falcon": later(causal, config("FalconConfig", hidden_size=1024,
                                       num_attention_heads=16, num_hidden_layers=2,
                                       vocab_size=1024, multi_query=True)),
        "phi": later(causal, config("PhiConfig", **common)),
        # Phi-3's default pad_token_id (32000) lies outside the small
        # vocabulary: the embedding would refuse it.
        "phi3": later(causal, config("Phi3Config", num_key_value_heads=4, pad_token_id=0,
                                     **common)),
        "stablelm": later(causal, config("StableLmConfig", num_key_value_heads=4,
                                         **common)),
        "gpt_bigcode": later(causal, config("GPTBigCodeConfig", n_embd=1024, n_head=16,
                                            n_layer=2, vocab_size=1024,
                                            n_positions=positions, multi_query=True)),
        "gptj": later(causal, config("GPTJConfig", n_embd=1024, n_head=16, n_layer=2,
                                     vocab_size=1024, n_positions=positions,
                                     rotary_dim=64)),
        "gpt_neo": later(causal, config("GPTNeoConfig", hidden_size=1024, num_heads=16,
                                        num_layers=2, vocab_size=1024,
                                        max_position_embeddings=positions,
                                        attention_types=[[["global", "local"], 1]],
                                        window_size=256)),
        # CodeGen keeps its causal band as a boolean buffer, as GPT-Neo does.
        "codegen": later(causal, config("CodeGenConfig", n_embd=1024, n_head=16,
                                        n_layer=2, vocab_size=1024, n_positions=positions,
                                        n_ctx=positions, rotary_dim=64)),
        "mpt": later(causal, config("MptConfig", d_model=1024, n_heads=16, n_layers=2,
                                    vocab_size=1024, max_seq_len=positions)),
        "qwen3": later(causal, config("Qwen3Config", num_key_value_heads=4, head_dim=64,
                                      **common)),
        "olmo": later(causal, config("OlmoConfig", **common)),
        "gemma": later(causal, config("GemmaConfig", num_key_value_heads=4, head_dim=64,
                                      **common)),
        "roberta": later(model, config("RobertaConfig", **bert_like), "RobertaModel"),
        "distilbert": later(model, config("DistilBertConfig", dim=1024, n_heads=16,
                                          n_layers=2, hidden_dim=2816, vocab_size=1024,
                                          max_position_embeddings=positions),
                            "DistilBertModel"),
        "electra": later(model, config("ElectraConfig", embedding_size=1024, **bert_like),
                         "ElectraModel"),
        "deberta_v2": later(model, config("DebertaV2Config", relative_attention=True,
                                          pos_att_type=["p2c", "c2p"], **bert_like),
                            "DebertaV2Model"),
        "bart": later(model, config("BartConfig", d_model=1024, encoder_layers=2,
                                    decoder_layers=2, encoder_attention_heads=16,
                                    decoder_attention_heads=16, encoder_ffn_dim=2816,
                                    decoder_ffn_dim=2816, vocab_size=1024,
                                    max_position_embeddings=positions), "BartModel"),
    }


#: Attention sites per Hugging Face model (2 layers; encoder-decoders have
#: self-attention on both sides and cross-attention).
HF_SITES = {"llama": 2, "mistral": 2, "qwen2": 2, "gemma2": 2, "gpt2": 2,
            "bert": 2, "t5": 6, "t5_encoder": 2, "bloom": 2, "vit": 2, "whisper": 6,
            "clip": 2, "opt": 2, "gpt_neox": 2, "falcon": 2, "phi": 2, "phi3": 2,
            "stablelm": 2, "gpt_bigcode": 2, "gptj": 2, "gpt_neo": 2, "codegen": 2,
            "mpt": 2, "qwen3": 2,
            "olmo": 2, "gemma": 2, "roberta": 2, "distilbert": 2, "electra": 2,
            "deberta_v2": 2, "bart": 6}


def zoo_names() -> List[str]:
    """The hand-written modules: check_torch_compile's zoo, then the
    research zoo's and the wild zoo's (test/gpu/research_zoo.py,
    wild_zoo.py)."""
    import check_torch_compile as zoo
    import research_zoo
    import wild_zoo

    others = research_zoo.zoo(1, 64, "meta", DTYPE) + wild_zoo.zoo(1, 64, "meta", DTYPE)
    return list(zoo.NAMES) + [c[0] for c in others]


def zoo_case(name: str, batch: int, seq: int) -> Any:
    """A hand-written module's (name, module, inputs, sites), from any zoo."""
    import check_torch_compile as zoo
    import research_zoo
    import wild_zoo

    if name in zoo.NAMES:
        return zoo.case(name, batch, seq)
    for build in (research_zoo.zoo, wild_zoo.zoo):
        for case in build(batch, seq, DEVICE, DTYPE):
            if case[0] == name:
                return case
    raise SystemExit(f"unknown model {name}")


def vit_image(seq: int) -> int:
    """The image side whose 16-pixel patches make about `seq` tokens (one
    more: the class token)."""
    return 16 * max(int(round(seq ** 0.5)), 1)


def model_inputs(name: str, batch: int, seq: int) -> Tuple[Any, ...]:
    if name in zoo_names():
        return zoo_case(name, batch, seq)[2]()
    ids = torch.randint(0, 1024, (batch, seq), device=DEVICE)
    padding = torch.ones(batch, seq, device=DEVICE, dtype=torch.long)
    padding[0, seq - seq // 8:] = 0  # right padding on the first sequence
    if name == "bloom":  # forward(input_ids, past_key_values, attention_mask)
        return (ids, None, padding)
    if name in ("bert", "clip", "t5_encoder", "roberta", "distilbert", "electra",
                "deberta_v2"):
        return (ids, padding)
    if name in ("t5", "bart"):
        return (ids, padding, ids)  # input_ids, attention_mask, decoder_input_ids
    if name == "vit":
        side = vit_image(seq)
        return (torch.randn(batch, 3, side, side, device=DEVICE, dtype=DTYPE),)
    if name == "whisper":
        features = torch.randn(batch, 80, 2 * seq, device=DEVICE, dtype=DTYPE)
        return (features, None, ids)  # input_features, attention_mask, decoder_input_ids
    return (ids,)


def build(name: str, batch: int, seq: int) -> torch.nn.Module:
    models = hf_models(seq)
    if name in models:
        return models[name]().to(DEVICE).eval()
    return zoo_case(name, batch, seq)[1].to(DEVICE, DTYPE).eval()


def tensor_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    for attribute in ("logits", "last_hidden_state"):
        if getattr(output, attribute, None) is not None:
            return getattr(output, attribute)
    return output[0]


def cold_caches() -> None:
    """Fresh, empty compile caches for the next first call: Inductor's and
    Triton's directories, their in-process caches and Kiln's site cache.
    Each path's compile time then counts all the work a user's first run
    does, and no path reuses kernels another compiled before it in this
    process (Inductor alone, compiled first, would otherwise serve the
    Kiln path's own Inductor compiles from its caches)."""
    import importlib
    import tempfile

    directory = tempfile.mkdtemp(prefix="kiln-bench-cold-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(directory, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")
    os.environ["KILN_CACHE"] = os.path.join(directory, "kiln")
    for path in ("torch._inductor.codecache.PyCodeCache.cache_clear",
                 "torch._inductor.codecache.FxGraphCache.clear",
                 "torch._inductor.async_compile.CompiledTritonKernels.cache_clear"):
        module, owner, method = path.rsplit(".", 2)
        try:
            getattr(getattr(importlib.import_module(module), owner), method)()
        except (ImportError, AttributeError):
            pass  # not in this torch: nothing of it to clear
    import kiln.choice
    import kiln.site_cache

    kiln.site_cache._sites.clear()
    kiln.site_cache._packages_by_digest.clear()
    kiln.site_cache._training_sites.clear()
    kiln.choice._decisions.clear()


def steps_of(entries: List[Dict[str, Any]], field: str = "seconds") -> Dict[str, float]:
    """Seconds of each step of the backend's first calls (kiln.dynamo's
    entries' `seconds`: the main thread's time, each second in one step;
    or `overlapped`: work done beside it, kilnc and the sites' packages),
    summed over the graphs."""
    steps: Dict[str, float] = {}
    for entry in entries:
        for step, seconds in (entry.get(field) or {}).items():
            steps[step] = round(steps.get(step, 0.0) + seconds, 2)
    return steps


#: The most score elements one float64 reference call may hold (8.6 GB of
#: float64 scores, and as much again for their softmax).
REFERENCE_SCORES = 1 << 30


def reference_by_batch(reference: Callable, model: Any, inputs: Tuple[Any, ...],
                       batch: int, seq: int) -> torch.Tensor:
    """`reference(model, inputs)` (the float64 output), computed a few
    sequences at a time where a whole batch's float64 scores would not fit
    (b16 x s4096 asks 32 GiB at once): every input whose first axis is the
    batch is sliced, and the outputs joined. The modules treat sequences
    independently."""
    heads = 16  # the zoos' modules: width 1024, 16 heads of 64
    step = max(1, REFERENCE_SCORES // (heads * seq * seq))
    if step >= batch:
        return tensor_of(reference(model, inputs))
    pieces = []
    for start in range(0, batch, step):
        part = tuple(x[start:start + step] if isinstance(x, torch.Tensor) and x.dim() > 0
                     and x.shape[0] == batch else x for x in inputs)
        pieces.append(tensor_of(reference(model, part)))
    return torch.cat(pieces)


def write_profile(profiler: Any, path: Path) -> None:
    """The profile of a first call: the 40 functions of most cumulative
    time, then the 40 of most time of their own."""
    import io
    import pstats

    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(40)
    path.write_text(text.getvalue())


def bench(name: str, seq: int, tokens: int, timing: bool,
          cold: bool = True, kiln_first: bool = False,
          profile: Optional[str] = None,
          exact_all: bool = False) -> List[Dict[str, Any]]:
    from torch._dynamo.utils import counters

    batch = max(tokens // seq, 1)
    torch.manual_seed(0)
    model = build(name, batch, seq)
    inputs = model_inputs(name, batch, seq)
    rows: List[Dict[str, Any]] = []
    import check_torch_compile as zoo

    with torch.no_grad():
        want = tensor_of(model(*inputs))
        # The hand-written modules up to 4k tokens are checked against their
        # float64 output (eager bf16's own error beside); the rest against
        # eager bf16.
        exact = None
        if (name in zoo_names() or exact_all) and seq <= 4096:
            exact = reference_by_batch(zoo.reference, model, inputs, batch, seq)
        against = want if exact is None else exact
        first: Dict[str, Any] = {}

        def first_call(backend: str) -> None:
            # Each path's first call from cold caches; the path that runs
            # first in the process also pays the process's one-time costs
            # (imports, CUDA and cuBLAS set-up, Inductor's compile workers).
            torch._dynamo.reset()
            counters.clear()
            if cold:
                cold_caches()
            start = len(kiln.dynamo.reports)
            compiled = torch.compile(model, backend=backend)
            profiler = None
            if profile and backend == "kiln":
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            began = time.perf_counter()
            got = tensor_of(compiled(*inputs))
            torch.cuda.synchronize()
            if profiler is not None:
                profiler.disable()
                write_profile(profiler, Path(profile) / f"{name}-s{seq}.txt")
            first[backend] = dict(compiled=compiled, seconds=time.perf_counter() - began,
                                  got=got, start=start,
                                  sdpa=int(counters["inductor"].get("fuse_attention", 0)))

        for backend in (("kiln", "inductor") if kiln_first else ("inductor", "kiln")):
            first_call(backend)
        inductor = first["inductor"]["compiled"]
        inductor_compile_s = first["inductor"]["seconds"]
        sdpa = first["inductor"]["sdpa"]
        inductor_error = relative_error(first["inductor"]["got"], against)
        compiled = first["kiln"]["compiled"]
        kiln_compile_s = first["kiln"]["seconds"]
        got = first["kiln"]["got"]
        entries = kiln.dynamo.reports[first["kiln"]["start"]:]
        sites = sum(len(e["report"]["sites"]) for e in entries if e["report"])
        fused = sum(len(e["rewritten"]) for e in entries)
        notes = sorted({e["fallback"] for e in entries if e["fallback"]}
                       | {r for e in entries for r in e["skipped"].values()}
                       | {n for e in entries for n in e.get("notes", [])})
        unfused = sorted({u["reason"] for e in entries if e["report"]
                          for u in e["report"]["unfused"]})
        kiln_error = relative_error(got, against)
        base = dict(model=name, s=seq, batch=batch,
                    reference="float64" if exact is not None else "eager bf16")
        if exact is not None:
            base["eager_rel_err"] = relative_error(want, exact)
        times = {}
        if timing:
            times = time_interleaved({"eager": lambda: model(*inputs),
                                      "inductor": lambda: inductor(*inputs),
                                      "kiln": lambda: compiled(*inputs)})
        rows.append(dict(base, impl="eager", ms=times.get("eager"), sites=sites, fused=0))
        rows.append(dict(base, impl="inductor", ms=times.get("inductor"), sites=sites,
                         fused=sdpa, rel_err=inductor_error,
                         compile_s=inductor_compile_s))
        rows.append(dict(base, impl="kiln", ms=times.get("kiln"), sites=sites, fused=fused,
                         rel_err=kiln_error, ok=kiln_error < 3e-2, notes=notes,
                         choices=[c for e in entries
                                  for c in e.get("choices", {}).values()],
                         unfused=unfused, compile_s=kiln_compile_s,
                         compile_ratio=kiln_compile_s / inductor_compile_s,
                         first_path="kiln" if kiln_first else "inductor",
                         graphs=len(entries), steps=steps_of(entries),
                         onnx=sorted({str(e.get("onnx")) for e in entries
                                      if e.get("onnx")}),
                         overlapped=steps_of(entries, "overlapped")))
    del model
    torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(list(HF_SITES) + zoo_names()))
    parser.add_argument("--seqs", default="1024,4096,16384")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--warm", action="store_true",
                        help="keep compile caches between paths (first calls "
                             "then reuse each other's kernels)")
    parser.add_argument("--kiln-first", action="store_true",
                        help="Kiln's first call before Inductor's (so that Kiln's, "
                             "not Inductor's, pays the process's one-time costs)")
    parser.add_argument("--exact", action="store_true",
                        help="check the Hugging Face models against float64 too "
                             "(the hand-written modules always are, up to 4k)")
    parser.add_argument("--profile", metavar="DIR",
                        help="profile Kiln's first call of each case (cProfile; "
                             "DIR/<model>-s<seq>.txt)")
    parser.add_argument("--out")
    options = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    rows: List[Dict[str, Any]] = []
    for seq in (int(s) for s in options.seqs.split(",")):
        for name in options.models.split(","):
            try:
                new = bench(name, seq, options.tokens, not options.no_time,
                            cold=not options.warm, kiln_first=options.kiln_first,
                            profile=options.profile, exact_all=options.exact)
            except Exception as error:  # noqa: BLE001
                lines = f"{type(error).__name__}: {error}".strip().splitlines()
                message = " | ".join(lines[:2] + lines[-3:])[:1500]
                print(f"{name} s={seq}: ERROR {message}", flush=True)
                rows.append(dict(model=name, s=seq, impl="kiln", error=message, ok=False))
                continue
            rows += new
            if options.out:  # after each model: a run cut short keeps its rows
                Path(options.out).write_text(json.dumps(rows, indent=1))
            eager, inductor, kiln_row = new
            speed = ""
            if kiln_row["ms"]:
                speed = (f" eager {eager['ms']:.2f} ms, inductor {inductor['ms']:.2f}, "
                         f"kiln {kiln_row['ms']:.2f} ({inductor['ms'] / kiln_row['ms']:.2f}x "
                         f"inductor)")
            print(f"{name} s={seq} b={kiln_row['batch']}: sites {kiln_row['sites']} "
                  f"kiln {kiln_row['fused']} inductor-sdpa {inductor['fused']} "
                  f"err {kiln_row['rel_err']:.1e}{speed} first call: inductor "
                  f"{inductor['compile_s']:.1f} s, kiln {kiln_row['compile_s']:.1f} s "
                  f"({kiln_row['compile_ratio']:.2f}x inductor, {kiln_row['graphs']} graphs, "
                  f"{kiln_row['first_path']} first)"
                  + (f" steps {kiln_row['steps']} (sum {sum(kiln_row['steps'].values()):.2f} s)"
                     if kiln_row.get("steps") else "")
                  + (f" beside them {kiln_row['overlapped']}" if kiln_row.get("overlapped")
                     else "")
                  + (f" onnx {kiln_row['onnx']}" if kiln_row.get("onnx") else "")
                  + (f" notes {kiln_row['notes']}" if kiln_row["notes"] else "")
                  + (f" unfused {kiln_row['unfused'][:2]}" if kiln_row["unfused"] else ""),
                  flush=True)
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
