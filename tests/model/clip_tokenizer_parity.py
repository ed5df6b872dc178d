#!/usr/bin/env python3
"""Regenerates the CLIP tokenizer parity fixture in tests/model/data/clip_tokenizer/.

1. Trains a tiny CLIP-style byte-level BPE (256 byte symbols, the same 256 with "</w>", the
   merges learned from CORPUS below, then <|startoftext|> and <|endoftext|>, the layout of
   openai/clip-vit-large-patch14's vocab.json) and writes vocab.json and merges.txt.
2. Writes the config files of the two pad conventions as diffusers ships them:
   - the folder itself: Stable Diffusion 1.5's tokenizer/ (pad "<|endoftext|>", no
     added_tokens_decoder, so special_tokens_map.json is read);
   - tokenizer_2/: SDXL's tokenizer_2/ configs (pad "!", id 0, with an added_tokens_decoder);
     the C++ test copies vocab.json and merges.txt next to them.
3. Loads both with transformers.CLIPTokenizer.from_pretrained (as diffusers does), plus two
   tokenizers built from vocab.json/merges.txt alone (pad "!"; and a max length of 16), and
   records the ids of every string in CASES for each in expected.json, as the pipelines call it:
   tokenizer(text, padding="max_length", max_length=model_max_length, truncation=True).

4. Saves the sd15 and sdxl_tokenizer_2 tokenizers again with save_pretrained, which in
   transformers 5.x writes only tokenizer.json and tokenizer_config.json, into
   data/clip_tokenizer_json/{sd15,sdxl_tokenizer_2}/ (tokenizer.json re-written without
   indentation to keep the fixture small), reloads them, and checks that transformers gives
   the ids recorded in expected.json on them too; the C++ test checks from_folder on them
   against the same ids.

The C++ test (test_clip_tokenizer.cpp) needs only the committed files, not Python.
Usage: .venv/bin/python tests/model/clip_tokenizer_parity.py
"""

import collections
import json
import shutil
import sys
import tempfile
from pathlib import Path

import tokenizers
import transformers
from transformers import CLIPTokenizer

OUT = Path(__file__).resolve().parent / "data" / "clip_tokenizer"
JSON_OUT = OUT.parent / "clip_tokenizer_json"
NUM_MERGES = 700

CORPUS = """
a photo of a cat sitting on the table, high quality, detailed, masterpiece, best quality
a painting of the mountains at sunset by greg rutkowski, trending on artstation, 8k, 4k, hdr
portrait of a beautiful woman, studio lighting, sharp focus, cinematic, photorealistic
a dog running on the beach, golden hour, bokeh, 85mm, f/1.8, 1080p, 3.14, 1234, 2024
an astronaut riding a horse on the moon, digital art, concept art, illustration
it's a beautiful day, isn't it? they're here, we've seen it, i'm sure you'll like it, he'd go
don't stop, can't stop, won't stop; the cat's toy, the dogs' bowls
(masterpiece:1.2), [cat|dog], {red,blue}, --ar 16:9, ((best quality)), <lora:style:0.8>
café crème brûlée, naïve résumé, über straße, señor piñata, façade, smörgåsbord, ångström
東京 日本 写真 猫 犬 山 川 花 空 海 東京タワー ねこ いぬ カメラ 한국어 사진 고양이
москва фото кошка собака, αθήνα φωτογραφία γάτα σκύλος, مرحبا صورة قطة, שלום חתול
नमस्ते बिल्ली, สวัสดี แมว, xin chào con mèo, merhaba kedi İstanbul
🐱 🐶 😀 ❤️ 🔥 ✨ 🌸 🎨 👍 ⭐ 🌙 ☀️
"""

CASES = [
    "",
    " ",
    "   \t\n  ",
    "a photo of a cat",
    "A PHOTO OF A CAT",
    "A Photo Of A Cat, High Quality",
    "hello, world!",
    "it's",
    "IT'S",
    "they're here, we've seen it, I'm sure you'll like it, he'd go",
    "don't can't won't isn't",
    "rock'n'roll 'tis o'clock",
    "''s 's' '",
    "it’s (typographic apostrophe)",
    "1234",
    "3.14",
    "1080p 4k 8k 2024-11-30 16:9",
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
    "ねこ カタカナ ｶﾀｶﾅ",
    "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8 \uac00\u11a8 \u1100\u1161\u11a7",
    "москва ФОТО Ёж",
    "مرحبا שָׁלוֹם नमस्ते สวัสดี",
    "🐱 cat 😀😀",
    "👩\u200d👩\u200d👧 🇯🇵 👍🏽 ❤️",
    "!!!",
    "wow!!! really?!",
    "hello !world ! !",
    "...",
    "(masterpiece:1.2), [cat|dog], {a,b}, --ar 16:9",
    "((best quality)), <lora:style:0.8>",
    "a\tb\nc\r\nd",
    "a  \t\n  b",
    "\u00a0nbsp\u3000ideographic\u2028line\u2029para\u0085nel",
    "zero\u200bwidth\ufeffbom",
    "ctrl\x1c\x1dchars\x00nul",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|STARTOFTEXT|>hi",
    "a<|endoftext|>b",
    "<|ENDOFTEXT|> <|EndOfText|>",
    "!<|startoftext|> x<|startoftext|",
    "<|endoftext|><|endoftext|>",
    "x</w>y",
    "ＡＢＣ１２３ ﬁ ligature",
    "𝐀𝐁𝐂 𝒶𝒷𝒸",
    "\u0301abc \u0301",
    "a =\u0338 b \u2260",
    "!\u0338 !\u0301",
    "\u1c89\u1c8a \ua7cb \ua7ce \U00010d50",
    "\ue000 \U0010fffd \U0001f9ff",
    "MiXeD CaSe WoRdS",
    "photo_of-a~cat@home#1 $5 %50 ^_^ &amp;",
    "snake_case camelCase kebab-case",
    "a" * 200,
    "a photo of a cat " * 30,
    "café 東京 🐱 " * 40,
    "word " * 74 + "end",
    "word " * 75 + "end",
    "word " * 76 + "end",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train(corpus, num_merges):
    """Classic BPE over CLIP's pre-tokenized words (most frequent pair first, ties broken by the
    pair itself so that the result is reproducible)."""
    norm = normalizers_for_training()
    pre = pre_tokenizer_for_training()
    b2u = bytes_to_unicode()
    words = collections.Counter()
    for word, _ in pre.pre_tokenize_str(norm.normalize_str(corpus)):
        symbols = list(word)  # already byte-level characters
        symbols[-1] += "</w>"
        words[tuple(symbols)] += 1
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for pair in zip(w, w[1:]):
                pairs[pair] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    vocab = list(b2u.values())
    vocab += [v + "</w>" for v in vocab]
    vocab += [a + b for a, b in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(vocab)) == len(vocab)
    return {t: i for i, t in enumerate(vocab)}, merges


def normalizers_for_training():
    return CLIPTokenizer(vocab={"<|startoftext|>": 0, "<|endoftext|>": 1}).backend_tokenizer.normalizer


def pre_tokenizer_for_training():
    return CLIPTokenizer(vocab={"<|startoftext|>": 0, "<|endoftext|>": 1}).backend_tokenizer.pre_tokenizer


def added(content, normalized):
    return {"content": content, "lstrip": False, "normalized": normalized, "rstrip": False,
            "single_word": False}


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_configs(vocab):
    # runwayml/stable-diffusion-v1-5 tokenizer/ (no added_tokens_decoder)
    typed = lambda c: {"__type": "AddedToken", **added(c, True)}
    write_json(OUT / "special_tokens_map.json", {
        "bos_token": added("<|startoftext|>", True), "eos_token": added("<|endoftext|>", True),
        "pad_token": "<|endoftext|>", "unk_token": added("<|endoftext|>", True)})
    write_json(OUT / "tokenizer_config.json", {
        "add_prefix_space": False, "bos_token": typed("<|startoftext|>"), "do_lower_case": True,
        "eos_token": typed("<|endoftext|>"), "errors": "replace", "model_max_length": 77,
        "name_or_path": "openai/clip-vit-large-patch14", "pad_token": "<|endoftext|>",
        "special_tokens_map_file": "./special_tokens_map.json", "tokenizer_class": "CLIPTokenizer",
        "unk_token": typed("<|endoftext|>")})
    # stabilityai/stable-diffusion-xl-base-1.0 tokenizer_2/
    second = OUT / "tokenizer_2"
    second.mkdir(exist_ok=True)
    write_json(second / "special_tokens_map.json", {
        "bos_token": added("<|startoftext|>", True), "eos_token": added("<|endoftext|>", False),
        "pad_token": "!", "unk_token": added("<|endoftext|>", False)})
    decoder = {
        str(vocab["!"]): {**added("!", False), "special": True},
        str(vocab["<|startoftext|>"]): {**added("<|startoftext|>", True), "special": True},
        str(vocab["<|endoftext|>"]): {**added("<|endoftext|>", False), "special": True},
    }
    write_json(second / "tokenizer_config.json", {
        "add_prefix_space": False, "added_tokens_decoder": decoder, "bos_token": "<|startoftext|>",
        "clean_up_tokenization_spaces": True, "do_lower_case": True, "eos_token": "<|endoftext|>",
        "errors": "replace", "model_max_length": 77, "pad_token": "!",
        "tokenizer_class": "CLIPTokenizer", "unk_token": "<|endoftext|>"})


def save_tokenizer_json(configs, cases, meta, tmp):
    """Step 4: the transformers 5.x save_pretrained folders, checked against expected.json."""
    shutil.rmtree(JSON_OUT, ignore_errors=True)
    for name in ("sd15", "sdxl_tokenizer_2"):
        saved = tmp / f"saved_{name}"
        configs[name][0].save_pretrained(saved)
        files = sorted(p.name for p in saved.iterdir())
        assert files == ["tokenizer.json", "tokenizer_config.json"], (name, files)
        out = JSON_OUT / name
        out.mkdir(parents=True)
        shutil.copy(saved / "tokenizer_config.json", out)
        tokenizer_json = json.loads((saved / "tokenizer.json").read_text(encoding="utf-8"))
        with open(out / "tokenizer.json", "w", encoding="utf-8", newline="\n") as f:
            f.write(json.dumps(tokenizer_json, ensure_ascii=False, separators=(",", ":")) + "\n")

        tok = CLIPTokenizer.from_pretrained(out)
        assert tok.backend_tokenizer.model.end_of_word_suffix == "</w>"
        max_length = configs[name][1]
        got = {"max_length": max_length, "bos": tok.bos_token_id, "eos": tok.eos_token_id,
               "pad": tok.pad_token_id, "unk": tok.unk_token_id}
        assert got == meta[name], (name, got, meta[name])
        for case in cases:
            ids = tok(case["text"], padding="max_length", max_length=max_length,
                      truncation=True)["input_ids"]
            want = case[name] + [tok.pad_token_id] * (max_length - len(case[name]))
            assert ids == want, (name, case["text"])


def main():
    transformers.logging.set_verbosity_error()
    OUT.mkdir(parents=True, exist_ok=True)
    vocab, merges = train(CORPUS, NUM_MERGES)
    write_json(OUT / "vocab.json", vocab)
    with open(OUT / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n")
        f.writelines(f"{a} {b}\n" for a, b in merges)
    write_configs(vocab)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sdxl2 = tmp / "tokenizer_2"
        bare = tmp / "bare"
        for d in (sdxl2, bare):
            d.mkdir()
            shutil.copy(OUT / "vocab.json", d)
            shutil.copy(OUT / "merges.txt", d)
        for f in ("special_tokens_map.json", "tokenizer_config.json"):
            shutil.copy(OUT / "tokenizer_2" / f, sdxl2)
        # name -> (tokenizer, how the C++ test builds it)
        configs = {
            "sd15": (CLIPTokenizer.from_pretrained(OUT), 77),
            "sdxl_tokenizer_2": (CLIPTokenizer.from_pretrained(sdxl2), 77),
            "files_pad_bang": (CLIPTokenizer.from_pretrained(bare, pad_token="!"), 77),
            "files_max_16": (CLIPTokenizer.from_pretrained(bare), 16),
        }
        assert type(configs["sd15"][0]) is CLIPTokenizer  # the tokenizers-backed class in 5.x
        cases = []
        for text in CASES:
            sd15 = configs["sd15"][0]
            case = {"text": text, "tokenize": sd15(text, add_special_tokens=False)["input_ids"]}
            for name, (tok, max_length) in configs.items():
                ids = tok(text, padding="max_length", max_length=max_length,
                          truncation=True)["input_ids"]
                assert len(ids) == max_length
                # Stored without the trailing padding after the final eos; the test re-pads.
                body = tok(text, add_special_tokens=False)["input_ids"]
                used = min(len(body) + 2, max_length)
                assert ids[used:] == [tok.pad_token_id] * (max_length - used), (name, text)
                assert ids[used - 1] == tok.eos_token_id
                case[name] = ids[:used]
            cases.append(case)
        meta = {
            name: {"max_length": max_length, "bos": tok.bos_token_id, "eos": tok.eos_token_id,
                   "pad": tok.pad_token_id, "unk": tok.unk_token_id}
            for name, (tok, max_length) in configs.items()
        }
        save_tokenizer_json(configs, cases, meta, tmp)

    lines = ["{",
             f'  "generator": "tests/model/clip_tokenizer_parity.py with transformers '
             f'{transformers.__version__}, tokenizers {tokenizers.__version__}",',
             f'  "configs": {json.dumps(meta)},',
             '  "cases": [']
    lines += [f"    {json.dumps(c)}," for c in cases]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ]", "}"]
    (OUT / "expected.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{len(vocab)} tokens, {len(merges)} merges, {len(cases)} cases; "
          f"fixture {total} bytes in {OUT}")
    if total > 100_000:
        sys.exit("the fixture grew past 100 KB; shorten CORPUS or CASES")
    total = sum(p.stat().st_size for p in JSON_OUT.rglob("*") if p.is_file())
    print(f"save_pretrained folders {total} bytes in {JSON_OUT}")
    if total > 80_000:
        sys.exit("the tokenizer.json fixture grew past 80 KB; shorten CORPUS")


if __name__ == "__main__":
    main()
