"""T5-family references for loom's parity tests (issue 18; UMT5 for Wan, issue 19): tokenizers
and encoders made here with sentencepiece and transformers, never downloaded.

Called by make_reference.py. Writes under OUT:
  t5_tokenizer/<variant>/tokenizer.json and expected.json for three tokenizer.json shapes:
    v5            what transformers 5 writes when it converts a spiece.model (Precompiled
                  normalizer, WhitespaceSplit + Metaspace pre-tokenizer)
    legacy        the shape FLUX.1's tokenizer_2/tokenizer.json has (transformers 4 era:
                  Sequence[Precompiled, Replace(" {2,}", " ")] and a Metaspace pre-tokenizer
                  with add_prefix_space)
    byte_fallback a vocabulary with <0xNN> byte pieces and the byte_fallback flag, as UMT5's
  transformers 5's T5Tokenizer (T5TokenizerFast is the same class) takes only the vocabulary and
  the precompiled charsmap from tokenizer.json and sets its own pipeline (WhitespaceSplit +
  Metaspace, no byte fallback): the legacy and byte_fallback shapes check that loom does too.
  expected.json: for every string of CASES, transformers' ids as the Flux and Wan pipelines ask
  for them (padding="max_length", truncation=True) at max_length 64, and the unpadded,
  untruncated ids.
  t5/  and umt5/: T5EncoderModel / UMT5EncoderModel folders (config.json, model.safetensors),
  tiny and random, and cases/t5_encoder.* and cases/umt5_encoder.* with their outputs.
"""
import json
import os
import shutil

import torch

from reference_cases import save_case

CORPUS = """
a photo of a cat sitting on the table, high quality, detailed, masterpiece, best quality
a painting of the mountains at sunset by greg rutkowski, trending on artstation, 8k, 4k, hdr
portrait of a beautiful woman, studio lighting, sharp focus, cinematic, photorealistic
a dog running on the beach, golden hour, bokeh, 85mm, f/1.8, 1080p, 3.14, 1234, 2024
an astronaut riding a horse on the moon, digital art, concept art, illustration
a woman walks through a neon lit street at night, the camera slowly pans to the left
it's a beautiful day, isn't it? they're here, we've seen it, i'm sure you'll like it
(masterpiece:1.2), [cat|dog], {red,blue}, --ar 16:9, ((best quality)), <lora:style:0.8>
café crème brûlée, naïve résumé, über straße, señor piñata, façade, smörgåsbord, ångström
東京 日本 写真 猫 犬 山 川 花 空 海 東京タワー ねこ いぬ カメラ 한국어 사진 고양이
москва фото кошка собака, αθήνα φωτογραφία γάτα σκύλος, مرحبا صورة قطة, שלום חתול
"""

CASES = [
    "",
    " ",
    "   \t\n  ",
    "a photo of a cat",
    "A PHOTO OF A CAT",
    "A Photo Of A Cat, High Quality",
    "hello, world!",
    "it's they're we've I'm you'll he'd",
    "don't can't won't isn't",
    "1234",
    "3.14",
    "1080p 4k 8k 2024-11-30 16:9",
    "12345678901234567890",
    "½ ¼ ² ³ ⅷ Ⅻ ①",
    "١٢٣ ٣.١٤ ５０",
    "abc123def H2O x²",
    "café crème brûlée",
    "cafe\u0301 cre\u0300me",
    "e\u0301\u0323 a\u0308\u0301 o\u0323\u0302",
    "n\u0303 ñ N\u0303 Ñ",
    "naïve résumé über straße",
    "STRASSE ẞ ǅ ǈ",
    "İstanbul ISTANBUL ı",
    "ΣΊΣΥΦΟΣ Ωμέγα ΌΡΟΣ",
    "Å Ω K \u212b\u2126\u212a",
    "\u0344 \u0f73 \u0958",
    "东京 日本 写真",
    "ねこ カタカナ ｶﾀｶﾅ ｶﾞ",
    "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8 \uac00\u11a8",
    "москва ФОТО Ёж",
    "مرحبا שָׁלוֹם नमस्ते สวัสดี",
    "🐱 cat 😀😀",
    "👩\u200d👩\u200d👧 🇯🇵 👍🏽 ❤️",
    "!!!",
    "wow!!! really?!",
    "...",
    "(masterpiece:1.2), [cat|dog], {a,b}, --ar 16:9",
    "((best quality)), <lora:style:0.8>",
    "a\tb\nc\r\nd",
    "a  \t\n  b",
    "two  spaces",
    "three   spaces and    four",
    " leading space",
    "   leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085nel",
    "zero\u200bwidth\ufeffbom",
    "ctrl\x1c\x1dchars\x00nul\x07bell",
    "</s>",
    "a</s>b",
    "a </s> b",
    "<pad><unk></s>",
    "<extra_id_0> the <extra_id_1> cat <extra_id_99>",
    "<extra_id_100> <EXTRA_ID_0>",
    "<s> <|endoftext|>",
    "▁already▁metaspace ▁",
    "ＡＢＣ１２３ ﬁ ligature ㍻ ㎏",
    "𝐀𝐁𝐂 𝒶𝒷𝒸",
    "\u0301abc \u0301",
    "Ｋ\u0301 Ａ\u0308",
    "a =\u0338 b \u2260",
    "\ue000 \U0010fffd \U0001f9ff",
    "MiXeD CaSe WoRdS",
    "photo_of-a~cat@home#1 $5 %50 ^_^ &amp;",
    "snake_case camelCase kebab-case",
    "sks person, p3r5on, ohwx man",
    "a woman walks through a neon lit street at night, the camera slowly pans to the left",
    "qwertyuiopasdfghjklzxcvbnm",
    "a" * 200,
    "a photo of a cat " * 30,
    "café 東京 🐱 " * 40,
    "word " * 61 + "end",
    "word " * 62 + "end",
    "word " * 63 + "end",
    "word " * 64 + "end",
]

MAX_LENGTH = 64


def train_spiece(folder, byte_fallback):
    import sentencepiece as spm

    os.makedirs(folder, exist_ok=True)
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w") as f:
        lines = [l for l in CORPUS.splitlines() if l.strip()] + CASES[:-6]
        f.write("\n".join(lines * 20))
    # T5's special ids: <pad> 0, </s> 1, <unk> 2, no <s>.
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(folder, "spiece"), vocab_size=700,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        character_coverage=1.0, byte_fallback=byte_fallback,
        normalization_rule_name="nmt_nfkc", hard_vocab_limit=False, minloglevel=2)
    os.remove(corpus)
    os.remove(os.path.join(folder, "spiece.vocab"))


def legacy_shape(tokenizer_json):
    """FLUX.1's tokenizer_2/tokenizer.json shape, from the transformers 5 conversion."""
    with open(tokenizer_json) as f:
        j = json.load(f)
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        j["normalizer"], {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True,
                          "prepend_scheme": "always", "split": True}
    with open(tokenizer_json, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def set_byte_fallback(tokenizer_json):
    with open(tokenizer_json) as f:
        j = json.load(f)
    assert any(piece == "<0x41>" for piece, _ in j["model"]["vocab"]), "no byte pieces"
    j["model"]["byte_fallback"] = True
    with open(tokenizer_json, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def record(folder, tok):
    expected = []
    for text in CASES:
        expected.append({
            "text": text,
            "ids": tok(text).input_ids,
            "padded": tok(text, padding="max_length", max_length=MAX_LENGTH,
                          truncation=True).input_ids,
        })
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"max_length": MAX_LENGTH, "cases": expected}, f, ensure_ascii=False, indent=0)


def build_tokenizers(out):
    from transformers import T5Tokenizer

    root = os.path.join(out, "t5_tokenizer")
    shutil.rmtree(root, ignore_errors=True)
    tokenizers = {}
    for variant, byte_fallback in [("v5", False), ("byte_fallback", True)]:
        sp = os.path.join(root, variant + "_spiece")
        train_spiece(sp, byte_fallback)
        folder = os.path.join(root, variant)
        T5Tokenizer.from_pretrained(sp, extra_ids=100).save_pretrained(folder)
        if byte_fallback:  # the conversion drops the flag; UMT5's file has it
            set_byte_fallback(os.path.join(folder, "tokenizer.json"))
        if variant == "v5":
            legacy = os.path.join(root, "legacy")
            shutil.copytree(folder, legacy)
            legacy_shape(os.path.join(legacy, "tokenizer.json"))
        shutil.rmtree(sp)
    for variant in ["v5", "legacy", "byte_fallback"]:
        folder = os.path.join(root, variant)
        tok = T5Tokenizer.from_pretrained(folder)
        record(folder, tok)
        tokenizers[variant] = tok
    return tokenizers


def perturb_(model, generator):
    """Random weights of a useful size (transformers' T5 init makes some nearly zero)."""
    for p in model.parameters():
        p.copy_(torch.randn(p.shape, generator=generator) * 0.2)


def build_encoders(out, cases, tokenizer):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    g = torch.Generator().manual_seed(18)
    prompts = ["a photo of a cat", "sks style portrait, highly detailed, " * 3,
               "an astronaut riding a horse on the moon"]
    enc = tokenizer(prompts, padding="max_length", max_length=MAX_LENGTH, truncation=True,
                    return_tensors="pt")
    common = dict(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=48, num_layers=3,
                  num_heads=4, relative_attention_num_buckets=32,
                  relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
                  dropout_rate=0.0, layer_norm_epsilon=1e-6)
    t5 = T5EncoderModel(T5Config(**common)).eval()
    perturb_(t5, g)
    t5.save_pretrained(os.path.join(out, "t5"))
    # As the Flux pipeline calls it: ids only, no attention mask.
    save_case(cases, "t5_encoder", {"input_ids": enc.input_ids},
              {"last_hidden_state": t5(enc.input_ids).last_hidden_state})
    t5_out = t5
    umt5 = UMT5EncoderModel(UMT5Config(**common)).eval()
    perturb_(umt5, g)
    umt5.save_pretrained(os.path.join(out, "umt5"))
    # As the Wan pipeline calls it: with the attention mask.
    save_case(cases, "umt5_encoder",
              {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask},
              {"last_hidden_state": umt5(enc.input_ids, enc.attention_mask).last_hidden_state})
    return t5_out




@torch.no_grad()
def build(out, cases):
    """Returns the tiny T5 encoder and its tokenizer, for the Flux pipeline folder."""
    tokenizers = build_tokenizers(out)
    return build_encoders(out, cases, tokenizers["v5"]), tokenizers["v5"]
