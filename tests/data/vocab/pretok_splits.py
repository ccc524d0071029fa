#!/usr/bin/env python3
"""Reference word splits for Kiln's pre-tokenizers, computed with the published regular expressions.

    python3 tests/data/vocab/pretok_splits.py > tests/data/vocab/pretok_splits.txt

Needs the `regex` package (PyPI), which supports \\p{L}-style classes. The expressions are those of the
models' tokenizer.json files as llama.cpp's llama-vocab.cpp lists them; they are applied in turn, each one
splitting every piece so far into its matches and the text between them (llama.cpp's unicode_regex_split).
Output, one case per line: kind, the input, and the pieces, each UTF-8 in lowercase hex; pieces are
separated by commas.
"""
import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
CJK = "[一-龥ࠀ-一가-퟿]+"
DS_LETTERS = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-"
    "ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-"
    "ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃")
KINDS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "gpt-2": [GPT2],
    "mpt": [GPT2],
    "llama-bpe": [LLAMA3],
    "qwen2": [QWEN2],
    "deepseek-llm": ["[\r\n]", r"\s?[" + DS_LETTERS + "]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", CJK,
                     r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", GPT2],
    "refact": [r"\p{N}", GPT2],
}
INPUTS = [
    "Hello world", " Hello World!", "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "don't I'LL we'Re they'VE", "3333333 12345678 1234", "   leading and trailing   ", "\n\n\n  \n x",
    "a\r\n\r\nb", "\t\ttabs\t", "٣٤٥ ¹²³ ⅷ", "x\u00a0y\u2003z\u3000w", "$$+= <=> ^~| `tick`",
    "über naïve café Cửa Việt", "안녕하세요 世界", "Ελληνικά Кириллица", "(hello) [world] {x}", ". . . ...",
    "ǅemal ﬁne", "१२३ ๑๒", "🚀 (normal) 😶‍🌫️ ✅", "    Hello\n    Hello", "e\u0301 combining", "a\u0085b",
    "x  \n  y", "!!!!!!", "' '' 's", "ＡＢＣ　ｄｅｆ！", "\u2018quoted\u201d", "  ", "\n",
]


def split(text, exprs):
    pieces = [text]
    for e in exprs:
        out = []
        for p in pieces:
            last = 0
            for m in regex.finditer(e, p):
                if m.start() > last:
                    out.append(p[last:m.start()])
                out.append(m.group())
                last = m.end()
            if last < len(p):
                out.append(p[last:])
        pieces = out
    return pieces


def hexs(s):
    return s.encode("utf-8").hex()


for kind, exprs in KINDS.items():
    for text in INPUTS:
        print(kind, hexs(text), ",".join(hexs(p) for p in split(text, exprs)))
